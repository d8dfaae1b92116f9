#!/usr/bin/env bash
# Sixty-ninth session, call 1 of a lease (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench", ".xd"]):
# on an H200 first issue 24's FP8 decode rows (s67/one.sh, which stashes the peers' part 1; L=90), then on
# any Hopper every GPU test on today's code (s68/tests.sh: 300efdd's templates, whose 16-bit d 256 soft-cap
# store rule ran on no GPU in the sixty-eighth session).
set -u
mkdir -p $OUT/w
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  L=90 bash docs/dev/benchmarks/s67/one.sh
  mv $OUT/w/rc.txt $OUT/w/rc_one.txt
fi
T=$(( ${T:-560} - SECONDS )) bash docs/dev/benchmarks/s68/tests.sh
