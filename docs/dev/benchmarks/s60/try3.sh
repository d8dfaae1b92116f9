#!/usr/bin/env bash
# Sixtieth session, a device try (carry [".peers/manifest.json", ".peers/part1"]).  On an H200: stash the
# peers' part 1 (rc 3 expected) for b.sh.  On anything else (an H100): decode_ab of the decode tiles'
# L2 policy and prefetch (l2_variants.sh): this tree (evict_first, 128 bytes where a row has them)
# against evict_first with none / 256, and no evict_first with none / 128 / 256, on llama3-8b (8 KV
# heads: a d 128 e4m3 row is 128 bytes, the next 128 the next head's) and llama3-70b-tp8 (one KV head:
# the next 128 bytes are the next token's), bf16 and e4m3, the bench's write flush and a decode layer's
# L2 state; about 120 s.
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 60 python3 tools/peer_wheels.py install --dir .peers; echo "p1 rc $?"; exit 0
fi
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
bash docs/dev/benchmarks/s60/l2_variants.sh /tmp/tpl
C=cur=.,ef0=/tmp/tpl/ef0,ef256=/tmp/tpl/ef256,n0=/tmp/tpl/n0,n128=/tmp/tpl/n128,n256=/tmp/tpl/n256
for F in write layer; do
  timeout 200 python3 benchmarks/experiments/decode_ab.py --configs $C --passes 2 --flush $F \
    --shapes decode_trace_b128_paged16,decode_long_b8_128k --models llama3-8b,llama3-70b-tp8 --caches e4m3,bf16 \
    --json $W/l2v_$F.json > $W/l2v_$F.log 2>&1
  echo "flush $F rc $? at $SECONDS" >> $W/rc.txt
  grep -E "^(llama|gemma|gpt)" $W/l2v_$F.log | sed 's/ us / /g'
done
cat $W/rc.txt
cd $OUT && tar -czf w.tgz w
