#!/usr/bin/env bash
# Call X1 (after P1 = s43/p1.sh; carry [".peers/manifest.json", ".peers/part2"]): FA3 / FA4 installed, then
# option "x" (a share of the softmax's exponentials on the FMA pipe, templates/common/softmax.cuh ex2_fma)
# against "p" / "pt", interleaved CUDA-graph replays (tile_ab.py), causal 1 x 16k at gpt-oss's heads (64 / 8, d 64):
# the user soft-cap snippet (issue 25's variant_softcap_approx entry) with FA4's soft-cap score_mod beside, then
# the plain kernel with FA3 / FA4 beside.  KG_EX2_FMA = how many of every 8 exponentials of a row take the FMA pipe.
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
G=g16k=1:16384:64:8:64:1
C=bf16:64:192:128:2
timeout 270 python3 benchmarks/experiments/tile_ab.py --shapes $G --score-mod "50.f * tanhf(score / 50.f)" --fa4-softcap 50 \
  --configs p=$C:p,x2=$C:px:KG_EX2_FMA=2,x3=$C:px:KG_EX2_FMA=3,x4=$C:px:KG_EX2_FMA=4,x5=$C:px:KG_EX2_FMA=5,x6=$C:px:KG_EX2_FMA=6,fa4=fa4 \
  --passes 2 --json $W/softcap_g16k.json > $W/softcap_g16k.log 2>&1
echo "softcap rc $? at $SECONDS" >> $W/rc.txt
T=$(( 560 - SECONDS ))
timeout $T python3 benchmarks/experiments/tile_ab.py --shapes $G \
  --configs pt=$C:pt,x1=$C:ptx:KG_EX2_FMA=1,x2=$C:ptx:KG_EX2_FMA=2,x3=$C:ptx:KG_EX2_FMA=3,fa3=fa3,fa4=fa4 \
  --passes 2 --json $W/plain_g16k.json > $W/plain_g16k.log 2>&1
echo "plain rc $? at $SECONDS" >> $W/rc.txt
tail -n 3 $W/*.log
