#!/usr/bin/env bash
# Fifty-fourth session, calls 3 and 4 (built for this tree; the carry may not exceed 64 MiB with the tree):
# option "m" for tanh snippets on two warpgroups at head dim 128 (heuristics.SM90_MASK_SPLIT_SNIPPET_HEAD_DIMS).
# Always: its GPU tests (packed, paged, split, default options, d 128 and 256; with .devcache carried also
# tests/gpu/test_variant_gpu.py) and llama3-8b's snippet A/B in another process.  With [".devcache_bench",
# ".peers/manifest.json", ".peers/part2"] carried: the soft-cap / ALiBi snippets against FA4 and FlexAttention
# (s48/h2.sh's variant part) and, on an H200, the FP8 prefill entries against FA3 FP8.  Results in $OUT/w (w.tgz).
set -u
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
W=$OUT/w; mkdir -p $W
( sleep 570; cd $OUT && tar -czf w.tgz w ) & WD=$!
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
TESTS="tests/gpu/test_mask_split_gpu.py::test_two_warpgroup_tanh_snippet"
if [ -d .devcache ]; then
  timeout 60 python3 tools/device_cache.py unpack --dir .devcache --cache-dir $KERNELGEN_CACHE_DIR > $W/devcache.log 2>&1
  TESTS="$TESTS tests/gpu/test_variant_gpu.py"
fi
timeout 200 python3 -m pytest -v -p no:cacheprovider $TESTS > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
timeout 100 python3 benchmarks/experiments/tile_ab.py --shapes lsn=1:16384:32:8:128:1 --twice --passes 3 \
  --score-mod '50.f * tanhf(score / 50.f)' --configs p=bf16:128:128:128:2:p,mp=bf16:128:128:128:2:mp \
  --json $W/ab_lsn.json > $W/ab_lsn.log 2>&1
echo "ab lsn rc $? at $SECONDS" >> $W/rc.txt
if [ -d .peers/part2 ]; then
  timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench >> $W/devcache.log 2>&1
  timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
  export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
  for M in llama3-8b gpt-oss gemma2-9b; do
    T=$(( 560 - SECONDS )); [ $T -gt 40 ] || break
    timeout $T python3 -m kernelgen bench --flex some --budget 0 --json $W/var_$M.json --suite prefill \
      --model $M --only 'variant_softcap_approx_*,variant_alibi_prefill_*' > $W/var_$M.log 2>&1
    echo "variants $M rc $? at $SECONDS" >> $W/rc.txt
  done
  if grep -q H200 $W/gpu.txt; then
    for M in gpt-oss gemma2-9b; do
      T=$(( 560 - SECONDS )); [ $T -gt 40 ] || break
      timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/fp8_$M.json --suite prefill --dtype e4m3 \
        --model $M --only 'fp8_prefill_causal_s16k*' > $W/fp8_$M.log 2>&1
      echo "fp8 $M rc $? at $SECONDS" >> $W/rc.txt
    done
  fi
fi
kill $WD
cat $W/gpu.txt; tail -3 $W/tests.log; grep -E "FAILED|Error" $W/tests.log | head -20; cat $W/rc.txt; grep -A1 "min-max" $W/ab_lsn.log
cd $OUT && tar -czf w.tgz w
