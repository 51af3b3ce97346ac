#!/usr/bin/env bash
# Prints the cargo flags of the GPU backend to build llama.cpp with, and says on stderr which it
# chose: CUDA when the CUDA compiler and an NVIDIA GPU are there, Vulkan when its SDK (glslc and
# the headers) and a Vulkan device are, else the CPU. MEDUSA_GPU=cuda|vulkan|cpu chooses instead.
# setup.sh and test.sh build with the same flags, so that neither rebuilds what the other built.
set -euo pipefail

choice=${MEDUSA_GPU:-auto}
if [ "$choice" = auto ]; then
  if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    choice=cuda
  elif command -v glslc >/dev/null 2>&1 && [ -e /usr/include/vulkan/vulkan.h ] &&
    vulkaninfo --summary >/dev/null 2>&1; then
    choice=vulkan
  else
    choice=cpu
  fi
  reason="found on this machine; MEDUSA_GPU=cuda|vulkan|cpu chooses another"
else
  reason="from MEDUSA_GPU"
fi
case "$choice" in
  cuda) flags="--features engine/cuda" ;;
  vulkan) flags="--features engine/vulkan" ;;
  cpu) flags="" ;;
  *)
    echo "error: MEDUSA_GPU must be cuda, vulkan or cpu, not '$choice'" >&2
    exit 1
    ;;
esac
echo "llama.cpp backend: $choice ($reason)" >&2
echo "$flags"
