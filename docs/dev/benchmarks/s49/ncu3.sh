#!/usr/bin/env bash
# ncu2.sh with application replay (ncu2's kernel replay saves and restores memory between passes, which
# rewrites the L2 state the flush left): the FP8 and bf16 trace b128 attention kernels after a 256 MB
# write or read, today's kernels.  No carry; about 90 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum
for F in write read; do
  timeout 120 ncu --replay-mode application --profile-from-start off --clock-control none --cache-control none \
    --kernel-name kg_attention_fwd --metrics $M --csv \
    python3 benchmarks/experiments/profile_vs_peers.py --impl kernelgen --flush $F --shapes fp8_decode_b128,decode_b128 \
    > $W/ncu_app_$F.csv 2> $W/ncu_app_$F.err
  echo "ncu app $F rc $? at $SECONDS" >> $W/rc.txt
done
cat $W/rc.txt
for f in $W/ncu_app_*.csv; do echo "== $f"; grep -E "gpu__time|dram__bytes" $f | cut -d, -f12- ; done
cd $OUT && tar -czf w.tgz w
