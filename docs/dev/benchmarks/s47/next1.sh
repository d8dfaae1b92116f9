#!/usr/bin/env bash
# Next lease, call 1 (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]: about 57 MB with the tree):
# stash the peers' first part (as s43/p1.sh; rc 3 expected), then d.sh: the cost entries at gpt-oss's heads with the
# bench's twins, two processes.  Call 2 in the same lease (carry manifest, part 2, .devcache_bench): next2.sh for
# issue 25's variant entries with FA4 / FlexAttention, now with twins, for the report.
set -u
export PYTHONPATH=$PWD
mkdir -p $OUT/w
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $OUT/w/p1.log 2>&1; echo "p1 rc $? at $SECONDS" > $OUT/w/p1_rc.txt
bash docs/dev/benchmarks/s47/d.sh
