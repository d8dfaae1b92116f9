#!/usr/bin/env bash
# Pack-GQA's automatic bound for the 192-row tile (head dim 64): packed / unpacked at gpt-oss's heads with
# sinks, one causal request of 2k-16k tokens (the rule packs only below 1024 query tokens a request; the
# forty-ninth session measured 0.978-0.985 at 16k in one process).  Two processes, three passes each.
# No carry; about 150 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
for P in 1 2; do
  for N in 2048 4096 8192 16384; do
    timeout 60 python3 benchmarks/experiments/pack_gqa_ab.py --shapes long_gpt-oss --long $N --passes 3 \
      --json $W/pack_${N}_p$P.json > $W/pack_${N}_p$P.log 2>&1
    echo "long $N process $P rc $? at $SECONDS" >> $W/rc.txt
  done
done
cat $W/rc.txt; grep -h -o '"packed_over_unpacked": [0-9.]*' $W/pack_*.log | tr '\n' ' '
for f in $W/pack_*_p*.log; do echo "$f $(grep -o '"packed_over_unpacked": [0-9.]*' $f | cut -d' ' -f2 | tr '\n' ' ')"; done
cd $OUT && tar -czf w.tgz w
