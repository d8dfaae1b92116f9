#!/usr/bin/env bash
# session 37 call 10: peers part 2; `kernelgen bench --flush read` (new) and the default write flush on the decode entries
# whose calls are short (Azure, trace b32; llama3-8b and llama3-70b-tp8), FA3 / FA4 beside
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
for f in read write read; do
timeout 150 python3 -m kernelgen bench --suite decode --model llama3-8b,llama3-70b-tp8 --only 'decode_azure*,decode_trace_b32*' \
  --flush $f --flex off --budget 0 --json $W/bench_$f$SECONDS.json > $W/bench_$f$SECONDS.log 2>&1
echo "bench $f rc $? at $SECONDS" >> $W/rc.txt
done
