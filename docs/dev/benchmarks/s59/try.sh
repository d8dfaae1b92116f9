#!/usr/bin/env bash
# Fifty-ninth session, an H200 try (carry [".peers/manifest.json", ".peers/part1"]): on anything but an H200
# stop at once; on an H200 stash the peers' part 1 (rc 3 expected) for s58/c2.sh.
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || { echo "not an H200"; exit 0; }
timeout 60 python3 tools/peer_wheels.py install --dir .peers; echo "p1 rc $?"
