#!/usr/bin/env bash
# Sixtieth session, after s59/try.sh on the same H200 (carry [".peers/manifest.json", ".peers/part2",
# ".devcache_bench"]): issue 25's rows on this code with FA4 / FlexAttention beside: llama3-8b's
# sinks / ALiBi cost rows (causal 16k, 128-request decode), the gpt-oss tanh snippet against FA4 in N
# processes (default 3; the first with FlexAttention too), the new-variant first call (f771cf9's row); then issue 24's FP8 prefill
# entries of gpt-oss and gemma2 (FA3 FP8 beside) and the FP8 decode beside its bf16 call; L s in all.
set -u
W=$OUT/w; mkdir -p $W
L=${L:-340}; N=${N:-3}
( sleep $L; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
B="python3 -m kernelgen bench --flex off --budget 0"
left() { echo $(( L - 5 - SECONDS )); }
timeout $(left) $B --json $W/cost8b.json --suite prefill,decode --model llama3-8b \
  --only 'alibi_prefill_causal_s16k,sinks_prefill_causal_s16k,alibi_decode_b128_paged16,sinks_decode_b128_paged16' \
  > $W/cost8b.log 2>&1
echo "cost llama3-8b rc $? at $SECONDS" >> $W/rc.txt
for i in $(seq 1 $N); do
  [ $(left) -gt 45 ] || break
  F=off; [ $i = 1 ] && F=some   # the first with FlexAttention beside (the report's entry), the others FA4 only
  timeout $(left) python3 -m kernelgen bench --flex $F --budget 0 --json $W/snip$i.json --suite prefill --model gpt-oss \
    --only 'variant_softcap_approx_prefill_causal_s16k_gpt-oss' > $W/snip$i.log 2>&1
  echo "snippet $i rc $? at $SECONDS" >> $W/rc.txt
done
[ $(left) -gt 45 ] && { timeout $(left) python3 -m kernelgen bench --budget 0 --json $W/first_call.json --suite compile \
  --model llama3-8b --only variant_compile_first_call > $W/first_call.log 2>&1; echo "first call rc $? at $SECONDS" >> $W/rc.txt; }
for M in gpt-oss gemma2-9b; do
  [ $(left) -gt 40 ] || break
  timeout $(left) $B --json $W/fp8_$M.json --suite prefill --dtype e4m3 \
    --model $M --only 'fp8_prefill_causal_s16k*' > $W/fp8_$M.log 2>&1
  echo "fp8 $M rc $? at $SECONDS" >> $W/rc.txt
done
[ $(left) -gt 30 ] && { timeout $(left) $B --json $W/decode.json --suite decode \
  --dtype bf16,e4m3 --model llama3-8b --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1
  echo "decode rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cat $W/rc.txt; grep -h "^| [a-z]" $W/*.log | grep -v "^| name\|^| entry\|^| ---\|^| peer" | cut -c1-230
cd $OUT && tar -czf w.tgz w
