#!/usr/bin/env bash
# Sixty-sixth session, call 2 of a lease (after call 1 stashed the peers' part 1; carry
# [".peers/manifest.json", ".peers/part2", ".devcache_bench"]): on an H200 issue 25's gpt-oss tanh.approx
# snippet against FA4 in N processes, then issue 24's FP8 rows (s64/snip.sh, L s); on an H100 the
# FP8 d 64 / d 256 and snippet tile A/B of s62/ab.sh (dev numbers only).
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  L=${L:-300} N=${N:-2} bash docs/dev/benchmarks/s64/snip.sh
else
  L=${L:-200} L2=${L2:-110} L3=${L3:-110} bash docs/dev/benchmarks/s62/ab.sh
fi
