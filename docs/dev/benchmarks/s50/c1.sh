#!/usr/bin/env bash
# Fiftieth session, first call (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]):
# on an H200 s48/h1.sh (the peers' part 1, the FP8 decode beside its bf16 call, gpt-oss's cost entries
# with twins); on an H100 s49/next_pack.sh (pack-GQA's 192-row tile at 2k-16k, two processes).
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  L=${L:-300} bash docs/dev/benchmarks/s48/h1.sh
else
  bash docs/dev/benchmarks/s49/next_pack.sh
fi
