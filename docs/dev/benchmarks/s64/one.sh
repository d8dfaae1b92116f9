#!/usr/bin/env bash
# Sixty-fourth session, the first call of a lease (carry [".peers/manifest.json", ".peers/part1", ".devcache_var"]:
# the peers' part 1 and a small archive of test_variant_gpu.py's kernels, built by `tools/device_cache.py build
# --dir .devcache_var --steps gpu_tests --groups variant,variant_pack`, so that both fit the 64 MiB tree): stash
# part 1 (rc 3 expected) for s60/b.sh or s62/ab.sh on this lease, then the GPU tests of the mask_mod kernels
# whose source the sixty-second session's return type changed, then the rest of test_variant_gpu.py, within T s
# (default 280).  Any Hopper GPU.  Next on an H200: s60/b.sh (carry the manifest, ".peers/part2",
# ".devcache_bench"); on an H100: s62/ab.sh (the same carry).
set -u
T=${T:-280}
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $W/gpu.txt
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers part 1 rc $? at $SECONDS" >> $W/rc.txt
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_var > $W/devcache.log 2>&1; echo "unpack rc $? at $SECONDS" >> $W/rc.txt
K="document_mask or prefix_lm or mask"
timeout $((T - SECONDS)) python3 -m pytest -m gpu -v -rf -p no:cacheprovider tests/gpu/test_variant_gpu.py -k "$K" \
  > $W/pytest_mask.log 2>&1
echo "mask tests rc $? at $SECONDS" >> $W/rc.txt
[ $((T - SECONDS)) -gt 20 ] && { timeout $((T - SECONDS)) python3 -m pytest -m gpu -v -rf -p no:cacheprovider \
  tests/gpu/test_variant_gpu.py -k "not ($K)" > $W/pytest_rest.log 2>&1; echo "other variant tests rc $? at $SECONDS" >> $W/rc.txt; }
cat $W/rc.txt; tail -2 $W/peers.log; tail -2 $W/pytest_mask.log; tail -2 $W/pytest_rest.log 2>/dev/null
grep -hE "^FAILED|Error" $W/pytest_*.log | head -20
cd $OUT && tar -czf w.tgz w
