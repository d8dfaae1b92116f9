#!/usr/bin/env bash
# Call P2 (right after P1; carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]): FA3 / FA4 installed
# (they stay on the machine for D and P3); issue 24's FP8 prefill entries with FA3 FP8 beside (llama3-8b, gpt-oss,
# gemma2-9b; option "t" now reaches the FP8 kernels up to head dim 128) and tests/gpu/test_fp8_vs_fa3_gpu.py (issue
# 24 item 5: kernelgen's FP8 error against FA3's on the same inputs, 32k / 64k contexts, outliers); on t-default.
set -u
W=$OUT/w; mkdir -p $W
( sleep 400; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
for M in llama3-8b gpt-oss gemma2-9b; do   # one process a preset: its entries carry the preset's suffix
  T=$(( 280 - SECONDS )); [ $T -gt 30 ] || break
  timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/fp8_$M.json --suite prefill --model $M \
    --dtype e4m3 --only 'fp8_prefill_*' > $W/fp8_$M.log 2>&1
  echo "fp8 $M rc $? at $SECONDS" >> $W/rc.txt
done
T=$(( 390 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 -m pytest -q -s -p no:xdist -p no:cacheprovider tests/gpu/test_fp8_vs_fa3_gpu.py \
  --junitxml $W/fp8_vs_fa3.xml > $W/fp8_vs_fa3.log 2>&1; echo "fp8 vs fa3 rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
