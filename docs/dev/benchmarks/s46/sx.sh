#!/usr/bin/env bash
# One call (carry [".devcache"]) when little device time is left: the GPU suite on the commit with option "x" by
# default (tests/gpu/test_ex2_fma_gpu.py forces it on every Hopper path; no sanitizer or fuzz: the option changes
# only register arithmetic), then, with the time left (TOTAL s in all), option "x" against the kernels without it,
# interleaved CUDA-graph replays (tile_ab.py, no peers): causal 1 x 16k at gpt-oss's heads (64 / 8, d 64), the user
# soft-cap snippet (shares 2 / 4 = default / 6), and the FP8 tensor-core kernels at d 64 ("x" shares 2 / 3; "t")
# and d 128 ("t": the forty-fifth session's open A/B).
set -u
TOTAL=${TOTAL:-430}
W=$OUT/w; mkdir -p $W
( sleep $(( TOTAL - 5 )); cd $OUT && tar -czf w.tgz w ) & WD=$!
OUT=$W/suite PYTEST_LIMIT=${PYTEST_LIMIT:-290} bash tools/gpu_check.sh tests > $W/gpu_check.log 2>&1
echo "suite rc $? at $SECONDS" >> $W/rc.txt; tail -4 $W/suite/pytest.log >> $W/rc.txt; rm -f $W/suite/h200.md
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
G=g16k=1:16384:64:8:64:1
C=bf16:64:192:128:2
T=$(( TOTAL * 6 / 10 + 100 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 benchmarks/experiments/tile_ab.py --shapes $G --score-mod "50.f * tanhf(score / 50.f)" \
  --configs p=$C:p,x4=$C:px,x2=$C:px:KG_EX2_FMA=2,x6=$C:px:KG_EX2_FMA=6 \
  --passes 2 --json $W/softcap_g16k.json > $W/softcap_g16k.log 2>&1; echo "softcap rc $? at $SECONDS" >> $W/rc.txt; }
A=fp8q:128:128:224:2
B=fp8q:64:192:128:2
T=$(( TOTAL - 15 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 benchmarks/experiments/tile_ab.py --shapes $G,l16k=1:16384:32:8:128:1 \
  --configs p64=$B:p,x64=$B:px,x64b=$B:px:KG_EX2_FMA=3,t64=$B:pt,p128=$A:p,t128=$A:pt \
  --passes 1 --json $W/fp8.json > $W/fp8.log 2>&1; echo "fp8 rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
