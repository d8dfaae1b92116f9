#!/usr/bin/env bash
# Fifty-seventh session, on an H200 after c2h.sh and s48/h2.sh (the peers unpacked on this lease; carry
# [".devcache"]): issue 24's and 25's GPU tests there, within T seconds (default 560): FP8 against FA3 FP8's
# error (needs the peers), then the variant, sinks, ALiBi and FP8 tensor-core tests.  Results in $OUT/w.
set -u
W=$OUT/w; mkdir -p $W
T=${T:-560}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
[ -d .devcache ] && timeout 60 python3 tools/device_cache.py unpack --dir .devcache > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
timeout $((T - SECONDS)) python3 -m pytest -v -rf -p no:cacheprovider --junitxml=$W/junit.xml tests/gpu/test_fp8_vs_fa3_gpu.py \
  tests/gpu/test_sinks_gpu.py tests/gpu/test_alibi_gpu.py tests/gpu/test_variant_gpu.py tests/gpu/test_fp8_mma_gpu.py \
  > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
cat $W/gpu.txt $W/rc.txt; tail -3 $W/tests.log; grep -E "^FAILED|Error" $W/tests.log | head -20
cd $OUT && tar -czf w.tgz w
