#!/usr/bin/env bash
# Pack-GQA on the Hopper kernel at gpt-oss's heads, one causal request of 16384 tokens (never measured:
# the automatic choice packs only below 1024 query tokens a request), with the built-in soft-cap 50 (no
# sinks: issue 25's FA4 entry's shape) and plain with sinks.  No carry; about 70 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
timeout 80 python3 benchmarks/experiments/pack_gqa_ab.py --shapes long_gpt-oss --softcap 50 --no-sinks --passes 3 \
  --json $W/pack16k_softcap.json > $W/pack16k_softcap.log 2>&1; echo "softcap rc $? at $SECONDS" >> $W/rc.txt
timeout 60 python3 benchmarks/experiments/pack_gqa_ab.py --shapes long_gpt-oss --passes 2 \
  --json $W/pack16k_sinks.json > $W/pack16k_sinks.log 2>&1; echo "sinks rc $? at $SECONDS" >> $W/rc.txt
grep -h -o '"shape.*' $W/pack16k_*.log | cut -c1-400; cat $W/rc.txt
cd $OUT && tar -czf w.tgz w
