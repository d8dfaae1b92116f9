#!/usr/bin/env bash
# Fifty-eighth session, after c1.sh on the same H200 (carry [".peers/manifest.json", ".peers/part2",
# ".devcache_bench"]): issue 25's llama3-8b cost rows on this code (sinks / ALiBi at causal 16k and on
# the 128-request decode, FA4 beside), then the gpt-oss tanh snippet against FA4 in N separate processes
# (default 3), the FP8 prefill entries of gpt-oss and gemma2 against FA3 FP8, then the FP8 decode beside its
# bf16 call (issue 24's roof and speed-up, FA3 beside); L s in all (default 420).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-420}; N=${N:-3}
( sleep $L; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
timeout $(( L - 5 - SECONDS )) python3 -m kernelgen bench --flex off --budget 0 --json $W/cost8b.json --suite prefill,decode \
  --model llama3-8b --only 'alibi_prefill_causal_s16k,sinks_prefill_causal_s16k,alibi_decode_b128_paged16,sinks_decode_b128_paged16' \
  > $W/cost8b.log 2>&1
echo "cost llama3-8b rc $? at $SECONDS" >> $W/rc.txt
for i in $(seq 1 $N); do
  T=$(( L - 5 - SECONDS )); [ $T -gt 45 ] || break
  timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/snip$i.json --suite prefill \
    --model gpt-oss --only 'variant_softcap_approx_prefill_causal_s16k_gpt-oss' > $W/snip$i.log 2>&1
  echo "snippet $i rc $? at $SECONDS" >> $W/rc.txt
done
for M in gpt-oss gemma2-9b; do
  T=$(( L - 5 - SECONDS )); [ $T -gt 40 ] || break
  timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/fp8_$M.json --suite prefill --dtype e4m3 \
    --model $M --only 'fp8_prefill_causal_s16k*' > $W/fp8_$M.log 2>&1
  echo "fp8 $M rc $? at $SECONDS" >> $W/rc.txt
done
T=$(( L - 5 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/decode.json --suite decode \
  --dtype bf16,e4m3 --model llama3-8b --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1
  echo "decode rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cat $W/rc.txt; grep -h "^| [a-z]" $W/*.log | grep -v "^| name\|^| entry\|^| ---\|^| peer" | cut -c1-230
cd $OUT && tar -czf w.tgz w
