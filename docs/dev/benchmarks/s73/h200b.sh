#!/usr/bin/env bash
# Seventy-third session, H200 call B after h200a.sh (carry [".peers/manifest.json", ".peers/part2", ".devcache_new"]):
# issue 25's gpt-oss tanh.approx snippet row against FA4 in N processes (default 2; the first with FlexAttention beside, the report's form), then issue 24's FP8 prefill
# rows against FA3 FP8 (llama3-8b, gpt-oss, gemma2-9b), as s70/go200.sh without its mixed entry.  L s (default 330).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-330}; N=${N:-2}
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
grep -q H200 $W/gpu.txt || { cat $W/gpu.txt; echo "not an H200: stopped"; exit 0; }
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_new > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
B="python3 -m kernelgen bench --flex off --budget 0"
left() { echo $(( L - 5 - SECONDS )); }
for i in $(seq 1 $N); do
  [ $(left) -gt 45 ] || break
  F=$B; [ $i = 1 ] && F="python3 -m kernelgen bench --budget 0"   # the first with FlexAttention beside (mergeable)
  timeout $(left) $F --json $W/snip$i.json --suite prefill --model gpt-oss \
    --only 'variant_softcap_approx_prefill_causal_s16k_gpt-oss' > $W/snip$i.log 2>&1
  echo "snippet $i rc $? at $SECONDS" >> $W/rc.txt
done
for M in llama3-8b gpt-oss gemma2-9b; do
  [ $(left) -gt 40 ] || break
  timeout $(left) $B --json $W/fp8_$M.json --suite prefill --dtype e4m3 --model $M --only 'fp8_prefill_*' \
    > $W/fp8_$M.log 2>&1; echo "fp8 $M rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cat $W/rc.txt; grep -h "^| [a-z]" $W/*.log | grep -v "^| name\|^| entry\|^| ---\|^| peer" | cut -c1-230
cd $OUT && tar -czf w.tgz w
