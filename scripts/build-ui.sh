#!/usr/bin/env bash
# Builds the web UI into ui/dist when its sources changed since the last build, and replaces only
# the files whose bytes differ: an unchanged UI leaves ui/dist untouched, so cargo does not rebuild
# the desktop app that embeds it. `--force` builds even when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/../ui"
inputs=(src public index.html package.json package-lock.json svelte.config.js tsconfig.json vite.config.ts)
fingerprint=$(find "${inputs[@]}" -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)
stamp=node_modules/.medusa-ui-build
if [ "${1:-}" != "--force" ] && [ -f dist/index.html ] && [ "$(cat "$stamp" 2>/dev/null)" = "$fingerprint" ]; then
  exit 0
fi
echo "Building the web UI"
fresh=$(mktemp -d "${TMPDIR:-/tmp}/medusa-ui.XXXXXX")
trap 'rm -rf "$fresh"' EXIT
npm run --silent build -- --outDir "$fresh" --emptyOutDir
mkdir -p dist
(cd "$fresh" && find . -type f) | while IFS= read -r file; do
  if ! cmp -s "$fresh/$file" "dist/$file"; then
    mkdir -p "dist/$(dirname "$file")"
    cp "$fresh/$file" "dist/$file"
  fi
done
(cd dist && find . -type f) | while IFS= read -r file; do
  [ -e "$fresh/$file" ] || rm "dist/$file"
done
find dist -mindepth 1 -type d -empty -delete
echo "$fingerprint" >"$stamp"
