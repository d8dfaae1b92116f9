#!/usr/bin/env bash
# After next.sh, same lease or the next (no carry; about 250 s): option "m" on the other Hopper kernels,
# interleaved with twins, two passes: lsc llama3-8b (32 / 8, d 128) with the built-in soft-cap (p / mp);
# the plain kernels g64 (gpt-oss d 64, the 192-row packed tile) and l128 (d 128, 32 / 8 heads) with
# today's "pt" against "mpt"; gemma2's built-in soft-cap m256 (d 256).  Results in $OUT/w (one w.tgz).
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
run() {  # NAME SHAPE CONFIGS EXTRA...
  local N=$1 S=$2 C=$3; shift 3
  timeout 110 python3 benchmarks/experiments/tile_ab.py --shapes $N=$S --twice --passes 2 "$@" --configs $C \
    --json $W/ab_$N.json > $W/ab_$N.log 2>&1
  echo "ab $N rc $? at $SECONDS" >> $W/rc.txt
}
run lsc 1:16384:32:8:128:1 p=bf16:128:128:128:2:p,mp=bf16:128:128:128:2:mp --softcap 50
run g64 1:16384:64:8:64:1 pt=bf16:64:192:128:2:pt,mpt=bf16:64:192:128:2:mpt
run l128 1:16384:32:8:128:1 pt=bf16:128:128:128:2:pt,mpt=bf16:128:128:128:2:mpt
run m256 1:16384:16:8:256:1 p=bf16:256:128:80:2:p,mp=bf16:256:128:80:2:mp --softcap 50
cat $W/rc.txt; grep -h -A1 "min-max" $W/ab_*.log
grep -h -o '"max_abs_diff[^,]*' $W/*.json | sort | uniq -c | head
cd $OUT && tar -czf w.tgz w
