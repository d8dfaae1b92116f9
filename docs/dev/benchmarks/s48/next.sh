#!/usr/bin/env bash
# Next lease (no carry; about 280 s): the Hopper soft-cap kernels' remaining untried switches against
# today's default ("p", two warpgroups at d 64 / 128 for a soft-cap), interleaved with twins:
#   pt  option "t" on the soft-cap / variant kernels (heuristics.SM90_TILEINFO_EXTRAS; they build clean
#       on these causal shapes, NVRTC 13.0), o  no ping-pong on two warpgroups (overlap only),
#   s3  three K/V stages, n96  96-key blocks (d 64 only), pr  the built-in's tanh row by row (patch),
#   r4  the row max and sum as four independent chains each (patch, FlashAttention-4's sm_90 reductions),
#   u   (gemma2, d 256) the warp-uniform warpgroup index on the soft-cap kernel (patch);
# at gpt-oss heads with the tanh.approx snippet (the FA4 goal's entry) and the built-in soft-cap, at
# gemma2-9b's and at llama3-8b's with the built-in soft-cap.  Results in $OUT/w (one w.tgz: the device
# returns 8 files at most).
# TESTS=1 (a call of its own, about 220 s, T seconds): only the soft-cap / ALiBi / variant GPU tests of
# tests/gpu/test_hopper_gpu.py, test_variant_gpu.py and test_alibi_gpu.py with "t" on those kernels, for
# when "pt" won everywhere by more than the twins' spread.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
if [ "${TESTS:-0}" = 1 ]; then
  timeout ${T:-260} python3 -c "
import sys, pytest
from kernelgen.selection import heuristics
heuristics.SM90_TILEINFO_EXTRAS = True
sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/gpu/test_hopper_gpu.py', 'tests/gpu/test_variant_gpu.py',
                      'tests/gpu/test_alibi_gpu.py', '-k', 'softcap or variant or alibi']))" > $W/tests_t_extras.log 2>&1
  echo "tests rc $? at $SECONDS" >> $W/rc.txt
  tail -3 $W/tests_t_extras.log; cat $W/rc.txt; cd $OUT && tar -czf w.tgz w
  exit 0
fi
run() {  # NAME SHAPE D CONFIGS EXTRA...
  local N=$1 S=$2 D=$3 C=$4; shift 4
  timeout 150 python3 benchmarks/experiments/tile_ab.py --shapes $N=$S --twice --passes 2 "$@" --configs $C \
    --json $W/ab_$N.json > $W/ab_$N.log 2>&1
  echo "ab $N rc $? at $SECONDS" >> $W/rc.txt
}
G=p=bf16:64:128:128:2:p,pt=bf16:64:128:128:2:pt,o=bf16:64:128:128:2:,s3=bf16:64:128:128:3:p,n96=bf16:64:128:96:2:p
# the built-in soft-cap's tanh row by row (the snippet's order), benchmarks/experiments/patches/cap_rows.patch,
# and the row max / sum as four independent chains (patches/red4.patch, KG_RED4=1); both patches in one
# templates folder, each off unless its define is given
R=$PWD; TPL=$(mktemp -d); cp -r templates $TPL/
for P in cap_rows red4; do
  (cd $TPL && { patch -p1 -s -t < $R/benchmarks/experiments/patches/$P.patch || git apply $R/benchmarks/experiments/patches/$P.patch; })
done
run gsn 1:16384:64:8:64:1 64 $G,r4=bf16:64:128:128:2:p:KG_RED4=1:$TPL/templates --score-mod '50.f * tanhf(score / 50.f)'
run gsc 1:16384:64:8:64:1 64 $G,pr=bf16:64:128:128:2:p:KG_CAP_ROWS=1:$TPL/templates,r4=bf16:64:128:128:2:p:KG_RED4=1:$TPL/templates --softcap 50
# gemma2-9b's soft-cap (d 256, 13-15 % over its plain kernel): the warp-uniform warpgroup index there too
# (patches/d256_softcap_uniform_cg.patch: 8 bytes spilled outside the key-block loop, the P V wait after
# 20 of 42 exponentials instead of before the first), in its own templates folder
TPL2=$(mktemp -d); cp -r templates $TPL2/
(cd $TPL2 && { patch -p1 -s -t < $R/benchmarks/experiments/patches/d256_softcap_uniform_cg.patch || git apply $R/benchmarks/experiments/patches/d256_softcap_uniform_cg.patch; })
run msc 1:16384:16:8:256:1 256 p=bf16:256:128:80:2:p,u=bf16:256:128:80:2:p::$TPL2/templates,r4=bf16:256:128:80:2:p:KG_RED4=1:$TPL/templates --softcap 50
run lsc 1:16384:32:8:128:1 128 p=bf16:128:128:128:2:p,pt=bf16:128:128:128:2:pt,o=bf16:128:128:128:2:,r4=bf16:128:128:128:2:p:KG_RED4=1:$TPL/templates --softcap 50
cat $W/rc.txt; grep -h -A1 "min-max" $W/ab_*.log
cd $OUT && tar -czf w.tgz w
