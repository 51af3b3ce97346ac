#!/usr/bin/env bash
# Smoke test of the desktop app (target/release/medusa-playground, or the program given): starts it under Xvfb on the default model with a fresh history,
# waits until the model has loaded and the UI has called the backend, saves a screenshot of the
# screen and checks that the UI drew itself (its accent colour is on screen). Output:
# test-artifacts/desktop/{window.png,app.log}.
set -euo pipefail
cd "$(dirname "$0")/.."
app=${1:-target/release/medusa-playground}
out=test-artifacts/desktop
mkdir -p "$out"
rm -f "$out/window.png" "$out/app.log"
MEDUSA_DB="$(mktemp -d)/history.sqlite" \
  xvfb-run -a -s "-screen 0 1400x900x24" bash -c '
    out=$1
    "$2" 2>"$out/app.log" &
    app=$!
    ready() { grep -q "model loaded" "$out/app.log" && grep -q "the UI is connected" "$out/app.log"; }
    for _ in $(seq 1 180); do
      ready && break
      kill -0 $app 2>/dev/null || { echo "the app exited early:"; cat "$out/app.log"; exit 1; }
      sleep 1
    done
    ready || { echo "the model did not load or the UI never called:"; cat "$out/app.log"; kill $app; exit 1; }
    sleep 4  # the UI polls the backend every 1.5 s
    import -window root "$out/window.png"
    kill $app
    wait $app || true
  ' _ "$out" "$app"
# Share of the screen in the UI's accent colour (ui/src/theme.css, light scheme): the logo, the
# active tab and the send button; an error page or a blank window has none.
accent=$(convert "$out/window.png" -fuzz 6% -fill black +opaque '#5b4cdb' -fill white -opaque '#5b4cdb' \
  -colorspace gray -format '%[fx:mean]' info:)
if ! awk -v a="$accent" 'BEGIN { exit !(a > 0.0002) }'; then
  echo "the window does not show the UI (accent share $accent): $out/window.png" >&2
  exit 1
fi
echo "desktop smoke test passed: $out/window.png (accent share $accent)"
