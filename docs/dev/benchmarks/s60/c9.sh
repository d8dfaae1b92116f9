#!/usr/bin/env bash
# Sixtieth session (carry [".devcache"]): the user-variant GPU tests call 8's time limit left unrun that
# go through the decode tiles (paged decode, decode pack-GQA, mixed steps, plan / graph replays), T s.
set -u
T=${T:-170}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
mkdir -p $OUT/w
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $OUT/w/gpu.txt
timeout 60 python3 tools/device_cache.py unpack --dir .devcache --cache-dir cache > $OUT/w/unpack.log 2>&1
timeout $(( T - SECONDS )) python3 -m pytest tests/gpu/test_variant_gpu.py -m gpu -v -rf -p no:cacheprovider \
  -k "paged_decode or decode_pack_gqa or mixed_step or plan_graph" > $OUT/w/pytest.log 2>&1
echo "pytest rc $? at $SECONDS" >> $OUT/w/rc.txt
cat $OUT/w/gpu.txt $OUT/w/rc.txt; grep -c PASSED $OUT/w/pytest.log; grep -E "FAILED|ERROR" $OUT/w/pytest.log | head; tail -2 $OUT/w/pytest.log
cd $OUT && tar -czf w.tgz w
