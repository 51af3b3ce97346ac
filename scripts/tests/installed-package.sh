#!/usr/bin/env bash
# Builds the .deb, installs it, and checks the installed programs: `medusa --version`, the web UI
# that `medusa serve` finds beside it, and the desktop smoke test on the installed app.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/package.sh
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
deb=$(ls -1 target/package/release/bundle/deb/*.deb | head -n 1)
$sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall "./$deb"
dpkg -L medusa-playground | grep -E '^/usr/(bin|share/applications|share/icons)/' | sort

/usr/bin/medusa --version
port=18572
MEDUSA_DB="$(mktemp -d)/history.sqlite" /usr/bin/medusa serve --port "$port" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 "$server" 2>/dev/null || { echo "the installed medusa serve exited early" >&2; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/" | grep -q '<div id="app">' || {
  echo "the installed medusa serve does not serve the web UI" >&2
  exit 1
}
kill "$server"
echo "installed medusa serves the web UI"

scripts/desktop-smoke.sh /usr/bin/medusa-playground
