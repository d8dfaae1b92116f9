#!/usr/bin/env bash
# H200 (any lease; no carry, no peers needed): issue 24's FP8 decode beside its bf16 decode in both L2
# states the bench knows: after its default write flush (the report's regime) and after a read flush
# (the clean L2 a decode layer's projection GEMMs leave: decode_ab's --flush layer measured the same on
# the H100, forty-ninth session).  For the report's extra section (as extra.decode_read_flush_s38 was).
# About 150 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
for F in write read; do
  timeout 140 python3 -m kernelgen bench --flex off --budget 0 --flush $F --json $W/decode_$F.json --suite decode \
    --dtype bf16,e4m3 --model llama3-8b --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode_$F.log 2>&1
  echo "decode $F rc $? at $SECONDS" >> $W/rc.txt
done
cat $W/rc.txt; grep -h -E "fp8_decode|decode_trace|roof|Roofs" $W/decode_*.log | head -20
cd $OUT && tar -czf w.tgz w
