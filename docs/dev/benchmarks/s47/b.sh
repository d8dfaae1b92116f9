#!/usr/bin/env bash
# Call B (after P1 = s43/p1.sh, same lease; carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]),
# about L s (default 420; the steps after the first stop early): FA3 / FA4 installed, then
#   1. tile_ab.py, FP8 tensor-core kernels without / with option "t" (heuristics.SM90_FP8_TILEINFO, off) at gpt-oss's
#      (d 64) and llama3-8b's (d 128) heads, FA3 FP8 beside, 3 passes: issue 24's FP8 prefill misses;
#   2. the soft-cap snippet at gpt-oss's heads, kernelgen without "x" / with share 2 (m192), and m128 (the dispatcher's
#      tile) without / with lazy rescaling "r", FA4's soft-cap score_mod beside;
#   3. issue 24's FP8 decode (and its bf16 twin), then FP8 prefill entries of gpt-oss and gemma2-9b with FA3 FP8;
#   4. issue 25's soft-cap / ALiBi snippet entries of gpt-oss and gemma2-9b with FA4 / FlexAttention.
set -u
W=$OUT/w; mkdir -p $W
L=${L:-420}
( sleep $L; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
G=g16k=1:16384:64:8:64:1
A=fp8q:128:128:224:2
B=fp8q:64:192:128:2
timeout 120 python3 benchmarks/experiments/tile_ab.py --shapes $G,l16k=1:16384:32:8:128:1 \
  --configs p64=$B:p,t64=$B:pt,p128=$A:p,t128=$A:pt,fa3fp8=fa3fp8 \
  --passes 3 --json $W/fp8.json > $W/fp8.log 2>&1; echo "fp8 rc $? at $SECONDS" >> $W/rc.txt
C=bf16:64:192:128:2
timeout 60 python3 benchmarks/experiments/tile_ab.py --shapes $G --score-mod "50.f * tanhf(score / 50.f)" --fa4-softcap 50 \
  --configs p=$C:p,x2=$C:px:KG_EX2_FMA=2,p128=bf16:64:128:128:2:p,r128=bf16:64:128:128:2:pr,fa4=fa4 \
  --passes 2 --json $W/softcap_g16k.json > $W/softcap_g16k.log 2>&1; echo "softcap rc $? at $SECONDS" >> $W/rc.txt
T=$(( L * 6 / 10 - SECONDS ))
[ $T -gt 40 ] && { timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/decode.json --suite decode \
  --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1; echo "decode rc $? at $SECONDS" >> $W/rc.txt; }
T=$(( L * 8 / 10 - SECONDS ))
[ $T -gt 40 ] && { timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/fp8_prefill.json --suite prefill \
  --model gpt-oss,gemma2-9b --dtype e4m3 --only 'fp8_prefill_causal_*' > $W/fp8_prefill.log 2>&1; echo "fp8 entries rc $? at $SECONDS" >> $W/rc.txt; }
for M in gpt-oss gemma2-9b; do
  T=$(( L - 10 - SECONDS )); [ $T -gt 40 ] || break
  timeout $T python3 -m kernelgen bench --flex some --budget 0 --json $W/variants_$M.json --suite prefill \
    --model $M --only 'variant_softcap_approx_*,variant_alibi_prefill_*' > $W/variants_$M.log 2>&1
  echo "variants $M rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w
