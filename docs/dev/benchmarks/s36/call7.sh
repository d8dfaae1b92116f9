#!/usr/bin/env bash
# session 36 call 7: where the one-warp decode tile's time goes, by SASS line (ncu source counters: stall samples)
set -u
W=$OUT/w; mkdir -p $W
( sleep 300; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
for c in "llama3-8b decode_azure_b128_paged16" "llama3-70b-tp8 decode_trace_b32_paged16" "llama3-8b decode_trace_b128_paged16"; do
  set -- $c
  timeout 120 ncu --clock-control none --cache-control none --kernel-name kg_attention_fwd --launch-skip 5 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight --page source --print-source sass --csv \
    python3 .s36/drive.py $1 $2 7 $W > $W/src_$1_$2.csv 2> $W/src_$1_$2.err
  echo "ncu $1 $2 rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w
