#!/usr/bin/env bash
# call 7: peers part 1 saved on this machine; compile the kernels of call 8 (the FP8 prefill sweep's and the Azure decode entry's)
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers1 rc $?" >> $W/rc.txt
timeout 100 python3 -m kernelgen bench --suite decode --only 'decode_azure*,decode_trace_b128_paged16' --flex off --budget 0 --quick --json $W/warm.json > $W/warm.log 2>&1
echo "warm rc $? at $SECONDS" >> $W/rc.txt
cd $OUT && tar -czf w.tgz w
