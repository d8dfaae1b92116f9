#!/usr/bin/env bash
# Seventy-first session, call 1 (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench", ".xd"]):
# on an H200 stash the peers' part 1 (rc 3 expected; s70/go200.sh with part 2 next), then s70/three.sh's H200
# branch (the FP8 and fused GPU test files, mixed_trace_fp8, the FP8 decode rows); on an H100 s70/three.sh
# (its decode_ab of the keys-as-rows FP8 decode tile and the mixed entry). L s in all (default 400).
set -u
W=$OUT/w; mkdir -p $W
export L=${L:-400}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu0.txt
if grep -q H200 $W/gpu0.txt; then
  timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc0.txt
  L=$(( L - SECONDS ))
fi
bash docs/dev/benchmarks/s70/three.sh
cat $W/rc0.txt 2>/dev/null; tail -n 2 $W/peers.log 2>/dev/null
