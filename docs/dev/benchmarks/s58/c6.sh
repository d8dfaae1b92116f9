#!/usr/bin/env bash
# Fifty-eighth session (carry [".peers/manifest.json", ".peers/part1"]): stash the peers' part 1 on any GPU
# (rc 3 expected) for c2.sh in the same lease.
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 60 python3 tools/peer_wheels.py install --dir .peers; echo "p1 rc $?"
