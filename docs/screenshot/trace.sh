#!/bin/sh
# Takes docs/trace.png, the screenshot in docs/tools.md ("Tracing"): a real trace of
# `conformance`'s `traced` program on three ranks, converted by `rsmpi-trace`, opened in
# Catapult's trace viewer (the viewer behind chrome://tracing, as a standalone page made
# by its `trace2html`) in headless Chromium, with the messages' flow arrows switched on.
#
#   sh docs/screenshot/trace.sh            # writes docs/trace.png
#
# Needs: chromium (the Debian package), node and npm, python3, git, and the network for
# a clone of https://github.com/catapult-project/catapult (or CATAPULT=DIR, a checkout
# you have) and for npm's puppeteer-core (which drives the installed Chromium and
# downloads no browser). Not part of CI: the picture is documentation.
set -eu
cd "$(dirname "$0")/../.."
work=${WORK:-target/trace-screenshot}
mkdir -p "$work"
work=$(cd "$work" && pwd)
out=${OUT:-docs/trace.png}

cargo build --release --quiet -p conformance --bin traced -p rsmpi --bin rsmpi-trace \
    -p rsmpirun --bin rsmpirun
rm -rf "$work/trace"
# 12 iterations of a ring sendrecv, a 64 KiB any-source receive and a probe every 8th,
# a barrier every 6th; 15 us of computing at the start of each, so that calls are apart
RSMPI_TRACE="$work/trace" target/release/rsmpirun -n 3 target/release/traced 12 6 spin=15
target/release/rsmpi-trace "$work/trace"

catapult=${CATAPULT:-$work/catapult}
if [ ! -x "$catapult/tracing/bin/trace2html" ]; then
    git clone --quiet --depth 1 https://github.com/catapult-project/catapult "$catapult"
fi
python3 "$catapult/tracing/bin/trace2html" --quiet --output="$work/trace.html" \
    --title "rsmpi-trace: traced 12 6, three ranks over shared memory" "$work/trace/trace.json"

if [ ! -d "$work/node_modules/puppeteer-core" ]; then
    (cd "$work" && npm install --silent --no-save puppeteer-core)
fi
NODE_PATH="$work/node_modules" node docs/screenshot/shot.js "file://$work/trace.html" "$out"
echo "trace.sh: wrote $out"
