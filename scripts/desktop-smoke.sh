#!/usr/bin/env bash
# Smoke test of the desktop app: starts it under Xvfb on the default model with a fresh history,
# waits until the model has loaded, saves a screenshot of the screen and checks that the window
# drew something. Output: test-artifacts/desktop/{window.png,app.log}.
set -euo pipefail
cd "$(dirname "$0")/.."
out=test-artifacts/desktop
mkdir -p "$out"
rm -f "$out/window.png" "$out/app.log"
MEDUSA_DB="$(mktemp -d)/history.sqlite" \
  xvfb-run -a -s "-screen 0 1400x900x24" bash -c '
    out=$1
    target/release/medusa-playground 2>"$out/app.log" &
    app=$!
    for _ in $(seq 1 180); do
      grep -q "model loaded" "$out/app.log" && break
      kill -0 $app 2>/dev/null || { echo "the app exited early:"; cat "$out/app.log"; exit 1; }
      sleep 1
    done
    grep -q "model loaded" "$out/app.log" || { echo "the model did not load:"; cat "$out/app.log"; kill $app; exit 1; }
    sleep 4  # the UI polls the backend every 1.5 s
    import -window root "$out/window.png"
    kill $app
    wait $app || true
  ' _ "$out"
colors=$(identify -format '%k' "$out/window.png")
if [ "$colors" -lt 64 ]; then
  echo "the screenshot is nearly blank ($colors colours): $out/window.png" >&2
  exit 1
fi
echo "desktop smoke test passed: $out/window.png ($colors colours)"
