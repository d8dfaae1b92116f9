#!/usr/bin/env bash
# Where the FP8 decode's time goes after the bench's write flush: ncu (--cache-control none, so L2 keeps
# what the flush left) of the attention kernel of the 128-request trace batch, e4m3 and bf16 caches,
# after a 256 MB write or read, with the L2 evict_first hint (today) and without (a templates copy with
# KV_EVICT_FIRST false): duration, DRAM bytes read / written, L2 read sectors and misses.
# No carry; about 60 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
NH=$(mktemp -d); cp -r templates $NH/
sed -i 's/^constexpr bool KV_EVICT_FIRST = .*/constexpr bool KV_EVICT_FIRST = false;/' $NH/templates/attention/variant_sm80.cuh
grep -c "KV_EVICT_FIRST = false;" $NH/templates/attention/variant_sm80.cuh >> $W/rc.txt
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
for T in hint nohint; do
  for F in write read; do
    X=""; [ $T = nohint ] && X="--templates $NH/templates"
    timeout 100 ncu --profile-from-start off --clock-control none --cache-control none --kernel-name kg_attention_fwd \
      --metrics $M --csv python3 benchmarks/experiments/profile_vs_peers.py --impl kernelgen --flush $F $X \
      --shapes fp8_decode_b128,decode_b128 > $W/ncu_${T}_$F.csv 2> $W/ncu_${T}_$F.err
    echo "ncu $T $F rc $? at $SECONDS" >> $W/rc.txt
  done
done
cat $W/rc.txt
for f in $W/ncu_*.csv; do echo "== $f"; grep -E "gpu__time|dram__bytes|lookup_miss|op_read.sum|dram__throughput" $f | cut -d, -f5,12- | head -12; done
cd $OUT && tar -czf w.tgz w
