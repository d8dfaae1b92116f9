#!/usr/bin/env bash
# Call A (peers call 1 of 2): stash the peers' part 1; pack-GQA's first GPU run (its GPU tests, then the A/B
# against the unpacked kernel in one process); the d 192 / 256 uniform warpgroup index against the templates before it.  carry [".peers/manifest.json", ".peers/part1", "cache"]
# (cache: tools/warm_gpu_tests.py --only pack).
set -u
W=$OUT/w; mkdir -p $W
( sleep 265; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1
echo "peers rc $? (3: part 2 comes with call B) at $SECONDS" >> $W/rc.txt
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_hopper_pack_gqa_gpu.py \
  --junitxml=$W/junit.xml > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/tests.log >> $W/rc.txt
T=$(( 180 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 benchmarks/experiments/pack_gqa_ab.py --passes 1 \
  --shapes trace_llama3-8b,trace_llama3-70b-tp8,trace_gpt-oss,chunk_llama3-8b --json $W/pack_ab.json \
  > $W/pack_ab.log 2>&1; echo "ab rc $? at $SECONDS" >> $W/rc.txt; }
# 164d0cd's warp-uniform warpgroup index at d 192 / 256 (docs/dev/fa3_d256_bf16_sass.md) against b65cb42's
# templates (.s42/base/templates: `git archive b65cb42 templates | tar -x -C .s42/base`), interleaved in one process
for cfg in "256:128:80 c256=2:4096:16:16:256:1,n256=2:4096:16:16:256:0" "192:128:112 c192=2:4096:16:16:192:1"; do
  set -- $cfg; IFS=: read d bm bn <<< "$1"
  T=$(( 255 - SECONDS )); [ $T -gt 25 ] || break
  timeout $T python3 benchmarks/experiments/tile_ab.py --shapes $2 --passes 2 \
    --configs base=bf16:$d:$bm:$bn:2:p::.s42/base/templates,new=bf16:$d:$bm:$bn:2:p > $W/cg_ab_d$d.log 2>&1
  echo "cg ab d$d rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w
