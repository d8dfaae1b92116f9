#!/usr/bin/env bash
# session 37 call 13: the evict_first hint restricted to paged caches (KV_EVICT_FIRST = NW == 1 && PAGED): the FP8 GPU tests,
# which died of an illegal instruction in call 12 (the packed FP8 kernels' desc[UR1])
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_gpu.py --junitxml=$W/junit.xml > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
