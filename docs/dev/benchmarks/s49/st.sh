#!/usr/bin/env bash
# FP8 decode (e4m3): 3 / 4 K/V stages at 12 CTAs an SM, and 16 CTAs with 2 / 3 stages (Q's fragments in
# shared memory at head dim 128), against today's 2 stages at 12 (decode_ab.py, 3 passes); then ncu of
# the attention kernels of the 128-request trace batch and of 8 x 128k, bf16 against e4m3 caches
# (DRAM throughput, L2 hit rate, sectors a request, warp stalls).  No carry; about 200 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
timeout 150 python3 benchmarks/experiments/decode_ab.py --configs head=.,st3=.@st3,st4=.@st4,mb16=.@mb16,mb16st3=.@mb16+st3 \
  --passes 3 --shapes decode_trace_b128_paged16,decode_long_b8_128k,decode_trace_b32_paged16 \
  --models llama3-8b,llama3-70b-tp8 --caches e4m3 --json $W/st_ab.json > $W/st_ab.log 2>&1
echo "ab rc $? at $SECONDS" >> $W/rc.txt
tail -18 $W/st_ab.log
bash docs/dev/benchmarks/s49/ncu.sh   # the ncu part (in call 4 it named the wrong kernel: see the README)
grep -E '"(DRAM Throughput|Memory Throughput|L2 Hit Rate|Duration|Achieved Occupancy|Issued Warp Per Scheduler)"' $W/ncu.csv | cut -c1-400 | head -40
cd $OUT && tar -czf w.tgz w
