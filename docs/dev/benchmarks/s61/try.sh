#!/usr/bin/env bash
# Sixty-first session, a device try (carry [".peers/manifest.json", ".peers/part1"]).  On an H200: stash the
# peers' part 1 (rc 3 expected) for s60/b.sh.  On anything else (an H100): s60/desc.sh (do the paged FP8
# tiles whose hinted copies get desc[UR1] fault with the hint?); about 80 s.  The GPU suite (c8.sh) runs the
# new unmasked unsplit FP8 decode test.
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 60 python3 tools/peer_wheels.py install --dir .peers; echo "p1 rc $?"; exit 0
fi
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
timeout 200 bash docs/dev/benchmarks/s60/desc.sh > $W/desc.log 2>&1; echo "desc rc $? at $SECONDS" >> $W/rc.txt
cat $W/desc.log | tail -20
cat $W/rc.txt
cd $OUT && tar -czf w.tgz w
