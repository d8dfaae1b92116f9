#!/usr/bin/env bash
# Sixty-ninth session, a lease's first call (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]):
# on an H200 s67/one.sh first (the peers' part 1 stashed, issue 24's FP8 decode rows, L=90), then on any Hopper
# s69/ab.sh (gemma2's FP8 soft-cap kernels with a warp-uniform warpgroup index, A/B; FA3 FP8 beside only once
# part 2 is stashed too, so not in this call).
set -u
mkdir -p $OUT/w
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  L=90 bash docs/dev/benchmarks/s67/one.sh
  mv $OUT/w/rc.txt $OUT/w/rc_one.txt
fi
L=$(( ${T:-420} - SECONDS )) bash docs/dev/benchmarks/s69/ab.sh
