#!/usr/bin/env bash
# (Ran as call 4 at 1a451d6, with that commit's l2_prefetch_templates.sh, which wrote p256 / p128 folders.)
# Sixtieth session, a device try (carry [".peers/manifest.json", ".peers/part1"]).  On an H200: stash the
# peers' part 1 (rc 3 expected) for b.sh.  On anything else (an H100): decode_ab of the one-warp decode
# tiles' K/V copies with an L2 prefetch size (cp.async ... .L2::256B / .L2::128B beside the evict_first
# hint; the neighbouring 128 bytes of an FP8 d 128 row are the next KV head's), trace b128 and 8 x 128k,
# bf16 and e4m3 caches, the bench's write flush and the decode layer's state; about 150 s.
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 60 python3 tools/peer_wheels.py install --dir .peers; echo "p1 rc $?"; exit 0
fi
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
bash docs/dev/benchmarks/s60/l2_prefetch_templates.sh /tmp/tpl
for F in write layer; do
  timeout 150 python3 benchmarks/experiments/decode_ab.py --configs head=.,p256=/tmp/tpl/p256,p128=/tmp/tpl/p128 \
    --passes 2 --flush $F --shapes decode_trace_b128_paged16,decode_long_b8_128k --models llama3-8b \
    --caches e4m3,bf16 --json $W/l2pf_$F.json > $W/l2pf_$F.log 2>&1
  echo "flush $F rc $? at $SECONDS" >> $W/rc.txt
  tail -8 $W/l2pf_$F.log
done
cat $W/rc.txt
cd $OUT && tar -czf w.tgz w
