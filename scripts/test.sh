#!/usr/bin/env bash
# Sets up what is missing, then runs every test: Rust unit and real-model tests (engine, store,
# server, CLI, desktop commands), the UI's checks and unit tests, the browser end-to-end tests
# against `medusa serve`, the OpenAI client and Prometheus parser tests, the desktop app's smoke
# test under Xvfb, the .deb built, installed and tried, and a second `scripts/run.sh` that must
# rebuild nothing.
# Screenshots and logs land in test-artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
# Several llama.cpp contexts run at once here (two test threads, a server beside a browser).
# OpenMP's workers spin while they wait and take the cores from each other: told to sleep, the
# tests beside each other ran 3x faster under load, and a training test 16x.
export OMP_WAIT_POLICY=passive
scripts/setup.sh
cargo fmt --all --check
gpu_features=$(scripts/gpu-features.sh 2>/dev/null)
# shellcheck disable=SC2086 # the flags setup.sh built with
cargo clippy --release --workspace --all-targets $gpu_features -- -D warnings
# shellcheck disable=SC2086
cargo test --release --workspace $gpu_features
(cd ui && npm run check && npm test && npm run e2e)
.venv/bin/python -m pytest -q tests/openai_client tests/metrics
scripts/desktop-smoke.sh
scripts/tests/installed-package.sh
scripts/tests/second-start.sh
