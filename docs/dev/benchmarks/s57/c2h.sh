#!/usr/bin/env bash
# Fifty-seventh session, an H200 try (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]):
# on anything but an H200, stop at once (the H100's numbers are in s55); on an H200, s48/h1.sh: stash
# the peers' part 1 (rc 3 expected), the FP8 decode beside its bf16 decode, gpt-oss's ALiBi / sinks cost
# entries, L seconds (default 280).  Then s48/h2.sh in the next call of the lease (carry part 2).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | tee /dev/stderr | grep -q H200 || { echo "not an H200"; exit 0; }
L=${L:-280} bash docs/dev/benchmarks/s48/h1.sh
cat $OUT/w/rc.txt
