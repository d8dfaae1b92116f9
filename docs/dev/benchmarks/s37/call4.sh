#!/usr/bin/env bash
# session 37 call 4: peers part 2; the decode suite (llama3-8b, llama3-70b-tp8) with FA3 / FA4 at HEAD (152d98f)
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
timeout 400 python3 -m kernelgen bench --suite decode --model llama3-8b,llama3-70b-tp8 --flex off --budget 0 --json $W/bench_decode.json > $W/bench_decode.log 2>&1
echo "bench rc $? at $SECONDS" >> $W/rc.txt
