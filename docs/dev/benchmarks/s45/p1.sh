#!/usr/bin/env bash
# Call P1 (carry [".peers/manifest.json", ".peers/part1"]): stash the peers' first part on the machine (rc 3 expected).
export PYTHONPATH=$PWD
timeout 100 python3 tools/peer_wheels.py install --dir .peers; echo "peers rc $?"
