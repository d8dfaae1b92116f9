#!/usr/bin/env bash
# (Ran as call 5 at 07520f3, with that commit's l2_prefetch_templates.sh and templates.)
# Sixtieth session, a device try (carry [".peers/manifest.json", ".peers/part1"]).  On an H200: stash the
# peers' part 1 (rc 3 expected) for b.sh.  On anything else (an H100): the evict_first copies' L2 prefetch
# of 128 bytes (KG_EF_PREFETCH, this tree's default) against none (ef0) on the bench's paged decode batches
# of four presets, bf16 and e4m3 caches, the bench's write flush (decode_ab, two passes); then the fused
# mixed step (bf16, mixed_sweep's bench case at 44 short CTAs) with its decode tiles' plain copies
# prefetching 128 bytes (KG_CP_PREFETCH=128) against none.  About 250 s.
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 60 python3 tools/peer_wheels.py install --dir .peers; echo "p1 rc $?"; exit 0
fi
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
bash docs/dev/benchmarks/s60/l2_prefetch_templates.sh /tmp/tpl
for M in llama3-8b llama3-70b-tp8 gemma2-9b gpt-oss; do
  S=decode_trace_b128_paged16,decode_long_b8_128k; [ $M = llama3-8b ] && S=$S,decode_trace_b32_paged16
  timeout 120 python3 benchmarks/experiments/decode_ab.py --configs ef0=/tmp/tpl/ef0,ef128=. \
    --passes 2 --shapes $S --models $M --caches bf16,e4m3 --json $W/ef_$M.json > $W/ef_$M.log 2>&1
  echo "decode $M rc $? at $SECONDS" >> $W/rc.txt
  grep -E "^(llama|gemma|gpt)" $W/ef_$M.log
done
timeout 150 python3 benchmarks/experiments/mixed_sweep.py --cases bench,long --short-ctas 44 \
  --defines ';KG_CP_PREFETCH=128' --rounds 5 --json $W/mixed_cp.json > $W/mixed_cp.log 2>&1
echo "mixed rc $? at $SECONDS" >> $W/rc.txt
grep -A12 "^bench\|^long" $W/mixed_cp.log
cat $W/rc.txt
cd $OUT && tar -czf w.tgz w
