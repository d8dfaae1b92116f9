#!/usr/bin/env bash
# Fifty-third session, call 1 (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]; about 330 s):
# stash the peers' part 1 for call 2 (s48/h2.sh, same lease; rc 3 expected), then option "m" at d 256 with
# three passes and twins (tile_ab lifts SM90_MASK_SPLIT_MAX_HEAD_DIM where the letters hold "m"):
#   msn  gemma2-9b (16 / 8, d 256) causal 1 x 16k, the tanh.approx snippet (issue 25's 0.988x FA4 entry)
#   m256 the same with the built-in soft-cap
#   ga   gpt-oss ALiBi (64 / 8, d 64): the snippet s against the built-in b (issue 25's 1.035 variant_ratio)
# Results in $OUT/w (one w.tgz).
set -u
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
W=$OUT/w; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/p1.log 2>&1; echo "p1 rc $? at $SECONDS" >> $W/rc.txt
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
run() {  # NAME SHAPE PASSES CONFIGS EXTRA...
  local N=$1 S=$2 P=$3 C=$4; shift 4
  timeout 120 python3 benchmarks/experiments/tile_ab.py --shapes $N=$S --twice --passes $P "$@" --configs $C \
    --json $W/ab_$N.json > $W/ab_$N.log 2>&1
  echo "ab $N rc $? at $SECONDS" >> $W/rc.txt
}
run msn 1:16384:16:8:256:1 3 p=bf16:256:128:80:2:p,mp=bf16:256:128:80:2:mp --score-mod '50.f * tanhf(score / 50.f)'
run m256 1:16384:16:8:256:1 3 p=bf16:256:128:80:2:p,mp=bf16:256:128:80:2:mp --softcap 50
run ga 1:16384:64:8:64:1 2 s=bf16:64:192:128:2:p,b=alibi:64:192:128:2:p \
  --score-mod 'score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)'
cat $W/rc.txt; grep -h -A1 "min-max" $W/ab_*.log
grep -h -o '"max_abs_diff[^,]*' $W/*.json | sort | uniq -c | head
cd $OUT && tar -czf w.tgz w
