#!/usr/bin/env bash
# Seventy-fourth session, call A (carry [".peers/manifest.json", ".peers/part1", ".devcache_new"]): on an H200,
# s73/h200a.sh (the peers' part 1 stashed; mixed_trace_fp8 / mixed_trace_fp8_qq and the FP8 / bf16 decode rows,
# L s, default 200); on any GPU then the FA3 compat GPU test file (flash_attn_combine's new test among them),
# P s more (default 150).
set -u
L=${L:-200} bash docs/dev/benchmarks/s73/h200a.sh
W=$OUT/w; mkdir -p $W
S0=$SECONDS; P=${P:-150}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache PYTHONUNBUFFERED=1
( sleep $P; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
timeout $(( P - 10 )) python3 -m pytest tests/gpu/test_ops_compat_gpu.py -m gpu -v -rf -p no:cacheprovider \
  > $W/compat.log 2>&1; echo "compat pytest rc $? at $(( SECONDS - S0 ))" >> $W/rc.txt
kill $WD; tail -n 3 $W/compat.log; grep -hE "^FAILED|^ERROR" $W/compat.log | head
cd $OUT && tar -czf w.tgz w
