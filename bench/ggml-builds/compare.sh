#!/usr/bin/env bash
# Decode costs of llama.cpp built for AVX2 (as the medusa build is) and for AVX-512 VNNI, both
# with patches/ggml, side by side in one run: each round runs every build and kernel choice in
# turn. A build for instructions this CPU lacks is left out. llamafile's GEMM is off, as in exact
# mode. The sources are llama-cpp-sys-2's, as cargo fetched them; the builds go to
# target/ggml-builds and are reused.
#
#     bench/ggml-builds/compare.sh MODEL.gguf [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: compare.sh MODEL.gguf [ROUNDS]}
rounds=${2:-3}
host=$(rustc -vV | sed -n 's/^host: //p')
manifest=$(cargo metadata --format-version 1 --locked --filter-platform "$host" |
  python3 -c 'import json,sys; print(next(p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"] == "llama-cpp-sys-2"))')
llama=$(dirname "$manifest")/llama.cpp
[ -f "$llama/CMakeLists.txt" ] || { echo "no llama.cpp sources at $llama: run cargo fetch" >&2; exit 1; }
out=target/ggml-builds
mkdir -p "$out"
declare -A flags=(
  [avx2]=""
  [avx512]="-DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_BF16=ON"
)
declare -A cpu_flag=([avx2]=avx2 [avx512]=avx512_vnni)
builds=()
for build in avx2 avx512; do
  grep -qw "${cpu_flag[$build]}" /proc/cpuinfo && builds+=("$build")
done
for build in "${builds[@]}"; do
  dir=$out/$build
  # shellcheck disable=SC2086 # the flags are words
  cmake -S "$llama" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DGGML_LLAMAFILE=OFF \
    -DCMAKE_PROJECT_ggml_INCLUDE="$PWD/patches/ggml/apply.cmake" ${flags[$build]} >"$dir.configure.log"
  cmake --build "$dir" --target llama -j "$(nproc)" >"$dir.build.log"
  cc -O2 -I"$llama/include" -I"$llama/ggml/include" bench/ggml-builds/decode_costs.c \
    "$dir/src/libllama.a" "$dir/ggml/src/libggml.a" "$dir/ggml/src/libggml-cpu.a" \
    "$dir/ggml/src/libggml-base.a" -fopenmp -lstdc++ -lm -lpthread -o "$dir/decode_costs"
done
for round in $(seq "$rounds"); do
  for build in "${builds[@]}"; do
    for kernels in stock avx2 best; do
      echo "== round $round: built for $build, KERNELS=$kernels"
      KERNELS=$kernels "$out/$build/decode_costs" "$model" 30
    done
  done
done
