#!/usr/bin/env bash
# (next session) decode: a minimum dynamic-split share (key blocks a tile) in the scheduler, against the default
# quantum, on the short-context Azure decode and the trace decodes; one process, interleaved replays (decode_ab.py).
# The scheduler's quantum gives the Azure batch (980 tokens a request) tiles of ~10 key blocks (6208 tiles, 3.9 waves).
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
L='    share = (int)min(max(1LL, (11LL \* work \* p.num_heads + den - 1) / den), 0x7fffffffLL);'
for n in 16 32 64; do
  rm -rf /tmp/ms$n && mkdir -p /tmp/ms$n && cp -r templates /tmp/ms$n/
  sed -i "s|^$L|&\n    share = max(share, $n);  // experiment: a minimum share|" /tmp/ms$n/templates/scheduler/scheduler.cu.j2
  grep -c "experiment: a minimum share" /tmp/ms$n/templates/scheduler/scheduler.cu.j2 >> $W/rc.txt
done
timeout 500 python3 benchmarks/experiments/decode_ab.py --configs base=.,ms16=/tmp/ms16/templates,ms32=/tmp/ms32/templates,ms64=/tmp/ms64/templates \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16 --models llama3-8b,llama3-70b-tp8 \
  --caches bf16 --passes 2 --json $W/min_share.json > $W/min_share.log 2>&1
echo "min share rc $?" >> $W/rc.txt
