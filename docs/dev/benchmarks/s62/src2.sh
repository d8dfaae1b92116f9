#!/usr/bin/env bash
# Sixty-second session, on an H100 after try.sh (carry [".peers/manifest.json", ".peers/part2",
# ".devcache_bench"]): issue 24's two short FP8 prefill rows under ncu source counters, kernelgen and
# FA3 FP8 (the forty-second session's s42/src.sh, per-SASS executed counts and stall samples): gpt-oss's
# d 64 (64 / 8 heads, causal 1 x 16k) and d 256 causal (2 x 16 x 4096).  Split per key block with
# benchmarks/experiments/sass_regions.py.  Results in $OUT/w.
set -u
S=docs/dev/benchmarks/s42/src.sh
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
bash $S kernelgen 170 fp8_gptoss_16k fp8_causal_h256

bash $S fa3 170 fp8_gptoss_16k fp8_causal_h256
cat $OUT/w/rc.txt; ls -la $OUT/w
