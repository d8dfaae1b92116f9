#!/usr/bin/env bash
# Sixty-sixth session, call 1 of a short lease (carry [".peers/manifest.json", ".peers/part1",
# ".devcache_bench"]): stash the peers' part 1 (rc 3 expected), then within L s (default 150): on an
# H200 issue 24's FP8 decode rows, which need no peer (the FP8 decode against the copy roof and beside
# its bf16 call; FA3 is "unavailable" until part 2 comes); on an H100 the FP8 review's descale probe
# (every broadcast form of k/v/q_descale on each kernel path against the float64 reference).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-150}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
# (PEERS=0: a last call with no second one to follow: carry only .devcache_bench)
[ "${PEERS:-1}" = 1 ] && { timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt; }
left() { echo $(( L - 5 - SECONDS )); }
if grep -q H200 $W/gpu.txt; then
  timeout $(left) python3 -m kernelgen bench --flex off --budget 0 --json $W/decode.json --suite decode \
    --dtype bf16,e4m3 --model llama3-8b --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' \
    > $W/decode.log 2>&1; echo "decode rc $? at $SECONDS" >> $W/rc.txt
else
  timeout $(left) python3 docs/dev/benchmarks/s66/descale_probe.py > $W/probe.log 2>&1; echo "probe rc $? at $SECONDS" >> $W/rc.txt
fi
cat $W/gpu.txt $W/rc.txt; tail -3 $W/peers.log 2>/dev/null; grep -h "^| [a-z]" $W/*.log | grep -v "^| name\|^| entry\|^| ---\|^| peer" | cut -c1-230
tail -40 $W/probe.log 2>/dev/null
cd $OUT && tar -czf w.tgz w
