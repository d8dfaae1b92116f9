#!/usr/bin/env bash
# session 37 call 9: peers part 1 (call 10, right after, installs part 2)
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 120 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
