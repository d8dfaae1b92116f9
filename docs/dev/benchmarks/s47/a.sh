#!/usr/bin/env bash
# Call A (carry [".devcache", ".peers/manifest.json", ".peers/part1"]): stash the peers' first part (s43/p1.sh,
# rc 3 expected), then s46/sx.sh: the GPU suite with option "x" on by default, then the A/B without peers.
set -u
export PYTHONPATH=$PWD
mkdir -p $OUT/w
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $OUT/w/p1.log 2>&1; echo "p1 rc $? at $SECONDS" > $OUT/w/p1_rc.txt
TOTAL=$(( ${TOTAL:-440} - SECONDS )) bash docs/dev/benchmarks/s46/sx.sh
