#!/usr/bin/env bash
# Call P3 (right after P2, same lease: FA3 / FA4 are unpacked there; carry [".peers/manifest.json", ".devcache_bench"]):
# issue 24's FP8 prefill entries (FA3 FP8 beside; option "t" now reaches the FP8 kernels up to head dim 128) and
# the FP8 error against FA3's on the same inputs (tests/gpu/test_fp8_vs_fa3_gpu.py); issue 25's variant entries
# (FA4 and FlexAttention beside), llama3-8b, on branch t-default.
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
for M in llama3-8b gpt-oss gemma2-9b; do   # one process a preset: its entries carry the preset's suffix
  T=$(( 230 - SECONDS )); [ $T -gt 30 ] || break
  timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/fp8_$M.json --suite prefill --model $M \
    --dtype e4m3 --only 'fp8_prefill_*' > $W/fp8_$M.log 2>&1
  echo "fp8 $M rc $? at $SECONDS" >> $W/rc.txt
done
# issue 24 item 5: kernelgen's FP8 error against FA3's on the same inputs (32k / 64k contexts, outliers)
T=$(( 320 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 -m pytest -q -s -p no:xdist -p no:cacheprovider tests/gpu/test_fp8_vs_fa3_gpu.py \
  --junitxml $W/fp8_vs_fa3.xml > $W/fp8_vs_fa3.log 2>&1; echo "fp8 vs fa3 rc $? at $SECONDS" >> $W/rc.txt; }
T=$(( 550 - SECONDS ))
timeout $T python3 -m kernelgen bench --flex all --budget 0 --json $W/variants.json --suite prefill,decode,compile \
  --model llama3-8b --only 'sinks_*,alibi_*,variant_*' > $W/variants.log 2>&1
echo "variants rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w
