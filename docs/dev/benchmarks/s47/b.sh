#!/usr/bin/env bash
# Call B (the s46 call X with issue 24's FP8 decode entries added; after P1 = s43/p1.sh, same lease; carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]), about
# XLIMIT s (default 330; the steps after the first stop early): FA3 / FA4 installed, then option "x" (a share of the softmax's exponentials on the FMA pipe,
# templates/common/softmax.cuh ex2_fma; the default at head dim 64 with a soft-cap / transcendental snippet, share 4,
# and on the FP8 tensor-core kernels at head dim 64, share 2):
#   1. tile_ab.py (interleaved CUDA-graph replays; its configurations' letters are exact), causal 1 x 16k at gpt-oss's
#      heads (64 / 8, d 64), the user soft-cap snippet (issue 25's variant_softcap_approx) without "x" and with shares
#      2 / 4 (default) / 6, FA4's soft-cap score_mod beside;
#   2. issue 25's soft-cap / ALiBi snippet entries of gpt-oss and gemma2-9b with FA4 / FlexAttention (the bench);
#   3. tile_ab.py on the FP8 tensor-core kernels at gpt-oss's and llama3-8b's heads with FA3 FP8 beside: "p", "x"
#      (default share 2, and 3), "t" (the forty-fifth session's open A/B);
#   4. issue 24's causal FP8 prefill entry of gpt-oss with FA3 FP8 (the kernel that changed).
set -u
W=$OUT/w; mkdir -p $W
L=${XLIMIT:-420}
( sleep $L; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
G=g16k=1:16384:64:8:64:1
C=bf16:64:192:128:2
timeout 90 python3 benchmarks/experiments/tile_ab.py --shapes $G --score-mod "50.f * tanhf(score / 50.f)" --fa4-softcap 50 \
  --configs p=$C:p,x4=$C:px,x2=$C:px:KG_EX2_FMA=2,x6=$C:px:KG_EX2_FMA=6,fa4=fa4 \
  --passes 2 --json $W/softcap_g16k.json > $W/softcap_g16k.log 2>&1
echo "softcap rc $? at $SECONDS" >> $W/rc.txt
# issue 25's entries the option changes (the soft-cap snippet) or that missed (gpt-oss's ALiBi snippet), FA4 / Flex beside
for M in gpt-oss gemma2-9b; do
  T=$(( L * 7 / 10 - SECONDS )); [ $T -gt 40 ] || break
  timeout $T python3 -m kernelgen bench --flex some --budget 0 --json $W/variants_$M.json --suite prefill \
    --model $M --only 'variant_softcap_approx_*,variant_alibi_prefill_*' > $W/variants_$M.log 2>&1
  echo "variants $M rc $? at $SECONDS" >> $W/rc.txt
done
# issue 24's FP8 decode (the copy roof in FP8 bytes, 0.86 in the last report, 0.93-0.94 before) and its bf16 twin
T=$(( L * 8 / 10 - SECONDS ))
[ $T -gt 40 ] && { timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/decode.json --suite decode \
  --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1; echo "decode rc $? at $SECONDS" >> $W/rc.txt; }
A=fp8q:128:128:224:2
B=fp8q:64:192:128:2
T=$(( L * 9 / 10 - SECONDS ))
[ $T -gt 40 ] && { timeout $T python3 benchmarks/experiments/tile_ab.py --shapes $G,l16k=1:16384:32:8:128:1 \
  --configs p64=$B:p,x64=$B:px,x64b=$B:px:KG_EX2_FMA=3,t64=$B:pt,p128=$A:p,x128=$A:px,t128=$A:pt,fa3fp8=fa3fp8 \
  --passes 1 --json $W/fp8.json > $W/fp8.log 2>&1; echo "fp8 rc $? at $SECONDS" >> $W/rc.txt; }
T=$(( L - 10 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/fp8_gpt-oss.json --suite prefill \
  --model gpt-oss,gemma2-9b --dtype e4m3 --only 'fp8_prefill_causal_*' > $W/fp8_gpt-oss.log 2>&1; echo "fp8 entries rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
