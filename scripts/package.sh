#!/usr/bin/env bash
# Builds the desktop packages, a .deb and an .rpm, with Tauri's bundler: the desktop app, the
# `medusa` command line, the built web UI (for `medusa serve`), a desktop entry and the icon.
# Sets up and builds first (skipping what is done), then packages copies of the release binaries
# without their debug info. Packages land in target/package/release/bundle/{deb,rpm}/.
# AppImage is not built: its bundler downloads its tools (linuxdeploy) at build time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
staging=target/package
mkdir -p "$staging/release"
for binary in medusa-playground medusa; do
  strip --strip-debug -o "$staging/release/$binary" "target/release/$binary"
done
rm -rf "$staging/release/bundle"
# Tauri's command line, from npm (a prebuilt binary), beside the packages rather than in the UI's
# dependencies: only packaging needs it.
tauri_cli_version=2.12.5
tauri="$staging/tauri-cli/node_modules/.bin/tauri"
if [ "$("$tauri" --version 2>/dev/null)" != "tauri-cli $tauri_cli_version" ]; then
  npm install --prefix "$staging/tauri-cli" --no-save --no-package-lock --no-audit --no-fund \
    "@tauri-apps/cli@$tauri_cli_version"
fi
# From src-tauri, where the app's config is; the bundler takes the binaries from the staging dir.
(cd src-tauri && CARGO_TARGET_DIR="../$staging" "../$tauri" bundle --bundles deb,rpm --ci)
ls -1 "$staging"/release/bundle/deb/*.deb "$staging"/release/bundle/rpm/*.rpm
