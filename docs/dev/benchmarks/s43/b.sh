#!/usr/bin/env bash
# Call B (right after A, same lease: A's kernels are in cache/): option "t" against "p" where the first A/B did
# not reach: chunked prefill on pages of 64 / 128 (TMA) and packed, causal and non-causal d 64
# (192-row tile); interleaved graph replays, outputs compared (max_abs_diff must be 0 for "t").
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 benchmarks/experiments/paged_prefill_ab.py --pages 64,128,packed --passes 2 \
  --configs p=128:128:2:p,pt=128:128:2:pt > $W/ab_paged.log 2>&1; echo "paged rc $? at $SECONDS" >> $W/rc.txt
timeout 80 python3 benchmarks/experiments/tile_ab.py --shapes c64=8:2048:32:32:64:1,n64=8:2048:32:32:64:0 --passes 2 \
  --configs p=bf16:64:192:128:2:p,pt=bf16:64:192:128:2:pt > $W/ab_d64.log 2>&1; echo "d64 rc $? at $SECONDS" >> $W/rc.txt
