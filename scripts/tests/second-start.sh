#!/usr/bin/env bash
# A second start on an unchanged checkout rebuilds nothing: runs scripts/run.sh twice (no display,
# so it serves the web UI), each until /health answers, checks that the second run neither compiled
# nor installed nor built anything, and prints how long each took. Logs: test-artifacts/second-start/.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=test-artifacts/second-start
mkdir -p "$out"
port=18571
db="$(mktemp -d)/history.sqlite"

start() {
  local log=$1 started server
  started=$(date +%s%N)
  env -u DISPLAY -u WAYLAND_DISPLAY MEDUSA_DB="$db" scripts/run.sh --port "$port" >"$log" 2>&1 &
  server=$!
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
    kill -0 "$server" 2>/dev/null || { echo "scripts/run.sh exited early:" >&2; cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "$log: ready after $(( ($(date +%s%N) - started) / 1000000 )) ms"
  kill "$server"
  wait "$server" || true
}

start "$out/first.log"
start "$out/second.log"
if grep -E "Compiling|npm ci|Building the web UI|Installing" "$out/second.log"; then
  echo "the second start did work that was already done: $out/second.log" >&2
  exit 1
fi
echo "the second start rebuilt nothing"
