#!/usr/bin/env bash
# Sixty-seventh session, call 1 of a lease (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]):
# stash the peers' part 1 (rc 3 expected: part 2 comes with go.sh in the next call); on an H200 also
# issue 24's FP8 decode rows, which need no peer (the FP8 decode against the copy roof and beside its
# bf16 call), within L s (default 90).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-90}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
if grep -q H200 $W/gpu.txt; then
  [ -d .devcache_bench ] && timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
  timeout $(( L - 5 - SECONDS )) python3 -m kernelgen bench --flex off --budget 0 --json $W/decode.json --suite decode \
    --dtype bf16,e4m3 --model llama3-8b --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' \
    > $W/decode.log 2>&1; echo "decode rc $? at $SECONDS" >> $W/rc.txt
fi
cat $W/gpu.txt $W/rc.txt; tail -2 $W/peers.log; grep -h "^| [a-z]" $W/decode.log 2>/dev/null | grep -v "^| name\|^| entry\|^| peer" | cut -c1-200
