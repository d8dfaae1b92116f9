#!/usr/bin/env bash
# call 5: peers part 1 saved on this machine; compile the mixed suite's and the FP8 prefill entries' kernels (one bench run without FA3)
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers1 rc $?" >> $W/rc.txt
timeout 150 python3 -m kernelgen bench --suite mixed,prefill --only 'mixed_*,fp8_prefill*' --flex off --budget 0 --quick --json $W/warm.json > $W/warm.log 2>&1
echo "warm rc $? at $SECONDS" >> $W/rc.txt
cd $OUT && tar -czf w.tgz w
