#!/usr/bin/env bash
# Call A (peers call 1 of 2): stash the peers' part 1; pack-GQA's first GPU run (its GPU tests, then the A/B
# against the unpacked kernel in one process).  carry [".peers/manifest.json", ".peers/part1", "cache"]
# (cache: tools/warm_gpu_tests.py --only pack).
set -u
W=$OUT/w; mkdir -p $W
( sleep 200; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1
echo "peers rc $? (3: part 2 comes with call B) at $SECONDS" >> $W/rc.txt
timeout 100 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_hopper_pack_gqa_gpu.py \
  --junitxml=$W/junit.xml > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/tests.log >> $W/rc.txt
T=$(( 190 - SECONDS ))
[ $T -gt 30 ] && { timeout $T python3 benchmarks/experiments/pack_gqa_ab.py --passes 1 \
  --shapes trace_llama3-8b,trace_llama3-70b-tp8,trace_gpt-oss,chunk_llama3-8b --json $W/pack_ab.json \
  > $W/pack_ab.log 2>&1; echo "ab rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
