#!/usr/bin/env bash
# Sixty-seventh session, call 1 of a short lease (carry [".peers/manifest.json", ".peers/part1"]):
# stash the peers' part 1 (rc 3 expected: part 2 comes with go.sh in the next call).
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
cat $W/gpu.txt $W/rc.txt; tail -2 $W/peers.log
