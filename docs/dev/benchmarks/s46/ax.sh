#!/usr/bin/env bash
# One call (carry [".devcache"]) when about 360 s of device time are left: first option "x" against the kernels
# without it, interleaved CUDA-graph replays (tile_ab.py, no peers), causal 1 x 16k at gpt-oss's heads (64 / 8,
# d 64): the user soft-cap snippet (shares 2 / 4 = default / 6) and the FP8 tensor-core kernels ("x" shares 2 / 3,
# "t"); then, with the time left (TOTAL s in all), the GPU tests of the option (tests/gpu/test_ex2_fma_gpu.py) and
# the soft-cap / variant tests at head dim 64 that take it by default.
set -u
TOTAL=${TOTAL:-340}
W=$OUT/w; mkdir -p $W
( sleep $(( TOTAL - 5 )); cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 40 python3 tools/device_cache.py unpack --dir .devcache > $W/devcache.log 2>&1
G=g16k=1:16384:64:8:64:1
C=bf16:64:192:128:2
timeout 80 python3 benchmarks/experiments/tile_ab.py --shapes $G --score-mod "50.f * tanhf(score / 50.f)" \
  --configs p=$C:p,x4=$C:px,x2=$C:px:KG_EX2_FMA=2,x6=$C:px:KG_EX2_FMA=6 \
  --passes 2 --json $W/softcap_g16k.json > $W/softcap_g16k.log 2>&1; echo "softcap rc $? at $SECONDS" >> $W/rc.txt
B=fp8q:64:192:128:2
timeout 70 python3 benchmarks/experiments/tile_ab.py --shapes $G \
  --configs p64=$B:p,x64=$B:px,x64b=$B:px:KG_EX2_FMA=3,t64=$B:pt \
  --passes 2 --json $W/fp8.json > $W/fp8.log 2>&1; echo "fp8 rc $? at $SECONDS" >> $W/rc.txt
T=$(( TOTAL - 15 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 -m pytest -q -p no:cacheprovider -p no:xdist -rf tests/gpu/test_ex2_fma_gpu.py \
  tests/gpu/test_softcap_gpu.py "tests/gpu/test_variant_gpu.py::test_d64_three_warpgroups" --junitxml $W/x_tests.xml \
  > $W/x_tests.log 2>&1; echo "x tests rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/x_tests.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
