#!/usr/bin/env bash
# H200 call B (same lease, after h1.sh; carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]):
# FA3 / FA4 installed, then issue 25's soft-cap / ALiBi snippets against FA4 and FlexAttention (twins)
# for gpt-oss, llama3-8b and gemma2-9b, and issue 24's FP8 prefill entries against FA3 FP8.
set -u
W=$OUT/w; mkdir -p $W
L=${L:-450}
( sleep $L; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache2.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc2.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
for M in gpt-oss gemma2-9b; do
  T=$(( L - 10 - SECONDS )); [ $T -gt 40 ] || break
  timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/fp8_$M.json --suite prefill --dtype e4m3 \
    --model $M --only 'fp8_prefill_causal_s16k*' > $W/fp8_$M.log 2>&1
  echo "fp8 $M rc $? at $SECONDS" >> $W/rc2.txt
done
for M in gpt-oss llama3-8b gemma2-9b; do
  T=$(( L - 10 - SECONDS )); [ $T -gt 40 ] || break
  timeout $T python3 -m kernelgen bench --flex some --budget 0 --json $W/var_$M.json --suite prefill \
    --model $M --only 'variant_softcap_approx_*,variant_alibi_prefill_*' > $W/var_$M.log 2>&1
  echo "variants $M rc $? at $SECONDS" >> $W/rc2.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w
