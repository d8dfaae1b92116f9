#!/usr/bin/env bash
# call A: peers part 1 saved on this machine; the sanitizer subset at HEAD
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers1 rc $?" >> $W/rc.txt
OUT=$W/san SANITIZE_LIMIT=60 timeout 140 bash tools/sanitize.sh > $W/sanitize.log 2>&1; echo "sanitize rc $?" >> $W/rc.txt
tail -5 $W/sanitize.log >> $W/rc.txt
cd $OUT && tar -czf w.tgz w
