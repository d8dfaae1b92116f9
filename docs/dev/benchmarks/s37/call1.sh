#!/usr/bin/env bash
# session 37 call 1: peers part 1; L2 evict-first on every cp.async (K/V of the decode tiles) against HEAD's templates;
# per-kernel decode times at HEAD
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 120 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
timeout 260 python3 benchmarks/experiments/decode_ab.py --configs base=.s37/base/templates,ef=.s37/ef/templates,base2=.s37/base/templates,ef2=.s37/ef/templates \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16,decode_long_b8_128k --models llama3-8b,llama3-70b-tp8 \
  --caches bf16,e4m3 --passes 2 --json $W/ab_ef.json > $W/ab_ef.log 2>&1
echo "ab rc $? at $SECONDS" >> $W/rc.txt
for m in llama3-8b llama3-70b-tp8; do
timeout 60 python3 benchmarks/experiments/decode_profile.py --model $m --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_long_b8_128k --iters 20 --json $W/prof_$m.json > $W/prof_$m.log 2>&1
echo "prof $m rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w
