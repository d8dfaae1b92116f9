#!/usr/bin/env bash
# The FP8 and bf16 decode calls (HEAD, and 3 stages on e4m3) under the three L2 states of decode_ab.py:
# write (the bench's: 256 MB written, L2 full of dirty lines), read (clean lines), layer (the decode
# layer's GEMMs before attention).  No carry; about 90 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
for F in write read layer; do
  timeout 100 python3 benchmarks/experiments/decode_ab.py --configs head=.,st3=.@st3 --passes 2 --flush $F \
    --shapes decode_trace_b128_paged16,decode_long_b8_128k --models llama3-8b --caches e4m3,bf16 \
    --json $W/flush_$F.json > $W/flush_$F.log 2>&1
  echo "flush $F rc $? at $SECONDS" >> $W/rc.txt
  tail -8 $W/flush_$F.log
done
cat $W/rc.txt
cd $OUT && tar -czf w.tgz w
