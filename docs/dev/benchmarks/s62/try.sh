#!/usr/bin/env bash
# Sixty-second session, a device try (carry [".peers/manifest.json", ".peers/part1"]): on any GPU, stash
# the peers' part 1 (rc 3 expected) so that the next call on the same lease can install FA3 / FA4 with
# part 2.  Next on an H200: s60/b.sh (carry the manifest, ".peers/part2", ".devcache_bench"), then
# s60/c8.sh (carry ".devcache").  Next on an H100: s62/src2.sh (same carry as b.sh).
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 60 python3 tools/peer_wheels.py install --dir .peers; echo "p1 rc $?"
