#!/usr/bin/env bash
# One call: option "t" against "p"
# (tile_ab, three passes), pack-GQA on one long gpt-oss request, the source view of kernelgen on chunked_packed.
set -u
W=$OUT/w; mkdir -p $W
( sleep 195; cd $OUT && tar -czf w.tgz w ) & WD=$!
git log --oneline -1 > $W/commit.txt
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1; echo "unpack rc $? at $SECONDS" >> $W/rc.txt
for cfg in "96:128:128 c96=4:4096:32:32:96:1 ,n144=bf16:96:128:144:2:p,n176=bf16:96:128:176:2:p" "192:128:112 c192=2:4096:16:16:192:1" "128:128:128 c16k=1:16384:32:32:128:1,n4k=4:4096:32:32:128:0,gqa=4:4096:32:8:128:1 ,n176=bf16:128:128:176:2:p"; do
  set -- $cfg ""; IFS=: read d bm bn <<< "$1"
  T=$(( 150 - SECONDS )); [ $T -gt 25 ] || break
  timeout $T python3 benchmarks/experiments/tile_ab.py --shapes $2 --passes 3 \
    --configs p=bf16:$d:$bm:$bn:2:p,pt=bf16:$d:$bm:$bn:2:pt$3 > $W/tinfo_ab_d$d.log 2>&1
  echo "tinfo ab d$d rc $? at $SECONDS" >> $W/rc.txt
done
T=$(( 185 - SECONDS ))
[ $T -gt 25 ] && { timeout $T python3 benchmarks/experiments/pack_gqa_ab.py --passes 2 --long 16384 \
  --shapes long_gpt-oss --json $W/pack_long.json > $W/pack_long.log 2>&1
  echo "pack long rc $? at $SECONDS" >> $W/rc.txt; }
T=$(( 0 - SECONDS ))
[ $T -gt 18 ] && { timeout $T ncu --profile-from-start off --clock-control none -k regex:kg_attention_fwd -c 1 --import-source no \
    --section SourceCounters --section WarpStateStats --section SpeedOfLight -o $W/kernelgen_chunked_packed \
    python3 benchmarks/experiments/profile_vs_peers.py --impl kernelgen --shapes chunked_packed > $W/src.log 2>&1
  ncu -i $W/kernelgen_chunked_packed.ncu-rep --page source --csv --print-source sass | gzip > $W/kernelgen_chunked_packed_sass.csv.gz
  rm -f $W/kernelgen_chunked_packed.ncu-rep; echo "src at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
