#!/usr/bin/env bash
# Next lease (no carry; about 330 s): option "m" of the Hopper mainloop (the overlapped loop's key block
# in a masked and an unmasked copy, templates/attention/mainloop_sm90.cuh steady_block) against the
# default, interleaved with twins (--twice), two passes.  Why: FA4's sm_90 soft-cap kernel (SASS built on
# the CPU, docs/dev/perf-log.md "Fifty-second session") interleaves its 64 MUFU.TANH with the row max;
# ours issues them back to back and starts the max only after the in-block mask branch.  With "m" the
# unmasked copy interleaves like FA4's (same 2 MUFU a logit, 553 against 558 instructions a block).
#   gsn  gpt-oss heads (64 / 8, d 64), causal 1 x 16k, the tanh.approx snippet (issue 25's 0.939x FA4
#        entry): p (today), mp, and both on three warpgroups (p3 / mp3: WG3=transcendental, FA4's tile)
#   gsc  the same with the built-in soft-cap, also on three warpgroups (WG3=softcap: its causal d 64 kernel
#        builds there without spills now)
#   ga   gpt-oss ALiBi: the snippet s / sm against the built-in b / bm (issue 25's 1.035 variant_ratio)
#   msn  gemma2-9b (16 / 8, d 256, FA4's tile 128 x 80 too) with the snippet (issue 25's 0.988x FA4):
#        p / mp (tile_ab lifts SM90_MASK_SPLIT_MAX_HEAD_DIM where the letters hold "m"; no spills there)
# next2.sh: the built-in soft-cap at d 128 and the plain kernels.
# TESTS=1 (a call of its own, about 300 s): tests/gpu/test_mask_split_gpu.py (every Hopper kernel with
# "m"), for when "m" wins beyond the twins' spread.  RUNS="gsn gsc" runs only those A/Bs (about 170 s).
# Results in $OUT/w (one w.tgz).
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
if [ "${TESTS:-0}" = 1 ]; then
  timeout ${T:-420} python3 -m pytest -q -p no:cacheprovider tests/gpu/test_mask_split_gpu.py > $W/tests_m.log 2>&1
  echo "tests rc $? at $SECONDS" >> $W/rc.txt
  tail -3 $W/tests_m.log; cat $W/rc.txt; cd $OUT && tar -czf w.tgz w
  exit 0
fi
run() {  # NAME SHAPE CONFIGS EXTRA...  (RUNS="gsn gsc": only those)
  local N=$1 S=$2 C=$3; shift 3
  case " ${RUNS:-$N} " in *" $N "*) ;; *) return ;; esac
  timeout 110 python3 benchmarks/experiments/tile_ab.py --shapes $N=$S --twice --passes 2 "$@" --configs $C \
    --json $W/ab_$N.json > $W/ab_$N.log 2>&1
  echo "ab $N rc $? at $SECONDS" >> $W/rc.txt
}
T3=WG3=transcendental
run gsn 1:16384:64:8:64:1 p=bf16:64:128:128:2:p,mp=bf16:64:128:128:2:mp,p3=bf16:64:192:128:2:p:$T3,mp3=bf16:64:192:128:2:mp:$T3 \
  --score-mod '50.f * tanhf(score / 50.f)'
run gsc 1:16384:64:8:64:1 p=bf16:64:128:128:2:p,mp=bf16:64:128:128:2:mp,p3=bf16:64:192:128:2:p:WG3=softcap,mp3=bf16:64:192:128:2:mp:WG3=softcap \
  --softcap 50
run ga 1:16384:64:8:64:1 s=bf16:64:192:128:2:p,sm=bf16:64:192:128:2:mp,b=alibi:64:192:128:2:p,bm=alibi:64:192:128:2:mp \
  --score-mod 'score - slopes[head] * kg_abs(q_idx + kv_len - q_len - kv_idx)'
run msn 1:16384:16:8:256:1 p=bf16:256:128:80:2:p,mp=bf16:256:128:80:2:mp --score-mod '50.f * tanhf(score / 50.f)'
cat $W/rc.txt; grep -h -A1 "min-max" $W/ab_*.log
grep -h -o '"max_abs_diff[^,]*' $W/*.json | sort | uniq -c | head
cd $OUT && tar -czf w.tgz w
