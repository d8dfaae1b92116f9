#!/usr/bin/env bash
# session 36 call 2 (pdl-experiment checkout, KERNELGEN_PDL unset: every kernel renders as main's):
# the minimum split share (s34/call10_min_share.sh), the fused combine's warps a row (s35/next_mixed_row_warps.sh),
# FP8 d 256 with the uniform cg (s35/next_fp8_d256_cg.sh without FA3: base against cg)
set -u
W=$OUT/w; mkdir -p $W
( sleep 575; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
unset KERNELGEN_PDL
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
L='    share = (int)min(max(1LL, (11LL \* work \* p.num_heads + den - 1) / den), 0x7fffffffLL);'
for n in 16 32; do
  rm -rf /tmp/ms$n && mkdir -p /tmp/ms$n && cp -r templates /tmp/ms$n/
  sed -i "s|^$L|&\n    share = max(share, $n);  // experiment: a minimum share|" /tmp/ms$n/templates/scheduler/scheduler.cu.j2
  echo "ms$n sed $(grep -c 'experiment: a minimum share' /tmp/ms$n/templates/scheduler/scheduler.cu.j2)" >> $W/rc.txt
done
timeout 170 python3 benchmarks/experiments/decode_ab.py --configs base=.,ms16=/tmp/ms16/templates,ms32=/tmp/ms32/templates \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16 --models llama3-8b,llama3-70b-tp8 \
  --caches bf16 --passes 2 --json $W/min_share.json > $W/min_share.log 2>&1
echo "min share rc $? at $SECONDS" >> $W/rc.txt
T=$(( 400 - SECONDS )); [ $T -lt 60 ] && T=60
timeout $T python3 benchmarks/experiments/mixed_sweep.py --cases bench,long,short --short-ctas 44 \
  --combine-row-warps 4,1,2,8 --rounds 3 --json $W/mixed_rw.json > $W/mixed_rw.log 2>&1
echo "mixed rw rc $? at $SECONDS" >> $W/rc.txt
rm -rf /tmp/cgx && mkdir -p /tmp/cgx && cp -r templates /tmp/cgx/ && (cd /tmp/cgx && patch -p1 < $OLDPWD/docs/dev/experiments/fp8-mma-uniform-cg.patch) > $W/patch.log 2>&1
echo "patch rc $?" >> $W/rc.txt
T=$(( 565 - SECONDS )); [ $T -lt 30 ] && T=30
timeout $T python3 benchmarks/experiments/tile_ab.py --passes 3 \
  --shapes c4k=2:4096:16:4:256:1,n4k=2:4096:16:4:256:0 \
  --configs base=fp8q:256:128:128:2:p,cg=fp8q:256:128:128:2:p::/tmp/cgx/templates \
  > $W/d256_cg.log 2>&1
echo "tile_ab rc $? at $SECONDS" >> $W/rc.txt
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
kill $WD; cd $OUT && tar -czf w.tgz w
