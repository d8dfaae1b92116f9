#!/usr/bin/env bash
# Call 2 of a lease, right after s67/one.sh (carry [".peers/manifest.json", ".peers/part2",
# ".devcache_bench"]): on an H200 issue 25's one missing row (s64/snip.sh: the gpt-oss tanh.approx
# snippet against FA4, N=2 processes, then what time is left: the cost / FP8 rows); on an H100 the
# wide-O-store A/B (s67/ostore.sh).  On an H200, call 3 (no carry) is `bash docs/dev/benchmarks/s67/ostore.sh`.
# (The sixty-seventh session's first lease ran this script's H100 branch as the b160h A/B: 0.993-1.012.)
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  L=${L:-220} N=2 bash docs/dev/benchmarks/s64/snip.sh
else
  bash docs/dev/benchmarks/s67/ostore.sh
fi
