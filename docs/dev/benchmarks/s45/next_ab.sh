#!/usr/bin/env bash
# Next lease (carry [".devcache_bench"]: `python tools/device_cache.py build --dir .devcache_bench --steps bench`
# on the CPU holds the "p" kernels; the two "t" kernels compile on the device, about 20 s): option "t"
# on the FP8 tensor-core kernels against "p", interleaved CUDA-graph replays in one process
# (tile_ab.py sets heuristics.SM90_FP8_TILEINFO for the "pt" configurations), causal 16k at llama3-8b's
# heads (d 128, 224-key tile) and gpt-oss's (d 64, 192-row tile), three passes.  If "t" pays run after
# run, set heuristics.SM90_FP8_TILEINFO = True (f771cf9's GPU suite, sanitizer and fuzz ran it green).
set -u
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > /dev/null 2>&1
timeout 300 python3 benchmarks/experiments/tile_ab.py --shapes l16k=1:16384:32:8:128:1,g16k=1:16384:64:8:64:1 \
  --configs p128=fp8q:128:128:224:2:p,t128=fp8q:128:128:224:2:pt,p64=fp8q:64:192:128:2:p,t64=fp8q:64:192:128:2:pt \
  --passes 3 2>&1 | tail -20
