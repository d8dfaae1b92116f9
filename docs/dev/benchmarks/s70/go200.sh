#!/usr/bin/env bash
# Seventieth session, on an H200 after s70/one.sh (carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]):
# issue 25's one missing row (the gpt-oss tanh.approx snippet against FA4, N processes, default 2), issue 24's
# FP8 mixed entry on this tree (the keys-as-rows FP8 decode tile, 33 short-first CTAs), then the FP8 prefill rows
# and the cost rows as time allows (s64/snip.sh's order); L s in all (default 330).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-330}; N=${N:-2}
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
B="python3 -m kernelgen bench --flex off --budget 0"
left() { echo $(( L - 5 - SECONDS )); }
for i in $(seq 1 $N); do
  [ $(left) -gt 45 ] || break
  timeout $(left) $B --json $W/snip$i.json --suite prefill --model gpt-oss \
    --only 'variant_softcap_approx_prefill_causal_s16k_gpt-oss' > $W/snip$i.log 2>&1
  echo "snippet $i rc $? at $SECONDS" >> $W/rc.txt
done
[ $(left) -gt 40 ] && { timeout $(left) $B --json $W/mixed.json --suite mixed --dtype e4m3 --model llama3-8b \
  --only mixed_trace_fp8 > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt; }
for M in llama3-8b gpt-oss gemma2-9b; do
  [ $(left) -gt 40 ] || break
  timeout $(left) $B --json $W/fp8_$M.json --suite prefill --dtype e4m3 --model $M --only 'fp8_prefill_*' \
    > $W/fp8_$M.log 2>&1; echo "fp8 $M rc $? at $SECONDS" >> $W/rc.txt
done
[ $(left) -gt 60 ] && { timeout $(left) $B --json $W/cost8b.json --suite prefill,decode --model llama3-8b \
  --only 'alibi_prefill_causal_s16k,sinks_prefill_causal_s16k,alibi_decode_b128_paged16,sinks_decode_b128_paged16' \
  > $W/cost8b.log 2>&1; echo "cost llama3-8b rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cat $W/rc.txt; grep -h "^| [a-z]" $W/*.log | grep -v "^| name\|^| entry\|^| ---\|^| peer" | cut -c1-230
cd $OUT && tar -czf w.tgz w
