#!/usr/bin/env bash
# Sixty-ninth session, with little budget left (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]):
# on an H200 s67/one.sh (the peers' part 1 stashed, issue 24's FP8 decode rows; then s67/go.sh in the next
# call); on any other GPU nothing (the lease is given back at once).
set -u
mkdir -p $OUT/w
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/w/gpu.txt
if grep -q H200 $OUT/w/gpu.txt; then L=${L:-90} bash docs/dev/benchmarks/s67/one.sh; fi
