#!/bin/sh
# Fetches asciinema-player from npm and copies its built files and licence
# into internal/web/web/vendor/asciinema-player/, where the hub serves them
# (the recordings' player page, decision 039). A build of Tether runs no
# npm: these files are committed. Usage: scripts/update-asciinema-player.sh [version]
set -eu
version=${1:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/internal/web/web/vendor/asciinema-player
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "asciinema-player@$version" >/dev/null && tar xzf asciinema-player-*.tgz)
mkdir -p "$dest"
cp "$tmp/package/dist/bundle/asciinema-player.min.js" "$tmp/package/dist/bundle/asciinema-player.css" "$tmp/package/LICENSE" "$dest/"
sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$tmp/package/package.json" >"$dest/VERSION"
echo "asciinema-player $(cat "$dest/VERSION") in $dest"
