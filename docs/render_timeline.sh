#!/usr/bin/env bash
# Renders a memplan timeline in headless Chromium (Debian's `chromium` package) and saves a screenshot:
# the picture in the README. Usage: docs/render_timeline.sh [MEMPLAN_BIN] [OUT.png]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/memplan}
out=${2:-docs/timeline.png}
command -v chromium >/dev/null || { echo "render_timeline.sh: needs Debian's chromium (apt-get install chromium)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" timeline tests/models/resnet18_train.onnx --batch 32 --mode train --optimizer momentum -o "$tmp/timeline.html"
# Flags as the machine's own probe uses them: no sandbox as root, and no background network in a closed network.
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$tmp/profile" --hide-scrollbars \
  --window-size=1040,640 --screenshot="$out" "file://$tmp/timeline.html" 2>/dev/null
echo "wrote $out"
