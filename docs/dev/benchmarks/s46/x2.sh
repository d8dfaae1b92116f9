#!/usr/bin/env bash
# Call X2 (right after X1, same lease: the peers stay unpacked; carry [".peers/manifest.json"]): option "x" and
# option "t" on the FP8 tensor-core kernels against "p" (tile_ab.py; the "t" configurations set
# heuristics.SM90_FP8_TILEINFO), FA3 FP8 beside, causal 1 x 16k at llama3-8b's heads (d 128, 224-key tile) and
# gpt-oss's (d 64, 192-row tile); then the GPU tests of option "x" forced on every Hopper kernel
# (tests/gpu/test_ex2_fma_gpu.py: bf16 / fp16 / FP8 cache / FP8 q / soft-cap / window / splits / paged / user variant /
# fused / graph, at the default share and at 8 of 8).
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
A=fp8q:128:128:224:2
B=fp8q:64:192:128:2
timeout 300 python3 benchmarks/experiments/tile_ab.py --shapes l16k=1:16384:32:8:128:1,g16k=1:16384:64:8:64:1 \
  --configs p128=$A:p,t128=$A:pt,x128a=$A:px:KG_EX2_FMA=2,x128b=$A:px:KG_EX2_FMA=3,p64=$B:p,t64=$B:pt,x64a=$B:px:KG_EX2_FMA=2,x64b=$B:px:KG_EX2_FMA=3,x64c=$B:px:KG_EX2_FMA=4,fa3fp8=fa3fp8 \
  --passes 2 --json $W/fp8.json > $W/fp8.log 2>&1
echo "fp8 rc $? at $SECONDS" >> $W/rc.txt
T=$(( 570 - SECONDS ))
timeout $T python3 -m pytest -q -p no:cacheprovider -p no:xdist tests/gpu/test_ex2_fma_gpu.py --junitxml $W/ex2_fma.xml \
  > $W/ex2_fma.log 2>&1
echo "ex2_fma tests rc $? at $SECONDS" >> $W/rc.txt
tail -n 3 $W/*.log
