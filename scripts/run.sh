#!/usr/bin/env bash
# Sets up what is missing, then runs the playground on the default model: the desktop app when
# there is a display, otherwise the HTTP server with the web UI (it prints the address to open).
# Extra arguments go to `medusa serve` (e.g. --model PATH --port 8080); the desktop app reads
# MEDUSA_MODEL, MEDUSA_HEADS and MEDUSA_DB.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && [ $# -eq 0 ]; then
  exec target/release/medusa-playground
fi
echo "No display here: starting the server. Open the address below in a browser."
exec target/release/medusa serve "$@"
