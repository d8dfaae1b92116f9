#!/usr/bin/env bash
# Next session (no carry; any Hopper; about 300 s): pack-GQA on d 128's FP8 tensor-core tiles
# (benchmarks/experiments/patches/fp8_pack_d128.patch lifts SM90_FP8_PACK_MAX_HEAD_DIM to 128: the packed
# kernels build with exactly the unpacked ones' spills, CPU).  Applies the patch on the device's copy, runs
# the FP8 tensor-core GPU tests (test_packed_gqa_on_the_head_dim_128_tile: bounds, bit-equality unpacked),
# then packed / unpacked A/B with FP8 q / K / V at llama3-70b-tp8's heads (8 / 1: the trace, 4k, chunks of
# 512) and llama3-8b's (32 / 8, forced, for the record).  Merge if green and the trace gains.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
git apply benchmarks/experiments/patches/fp8_pack_d128.patch; echo "apply rc $?" >> $W/rc.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_fp8_mma_gpu.py > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
tail -3 $W/tests.log
AB_FLAGS="--dtype e4m3"; . docs/dev/benchmarks/s50/pack_ab.sh
ab tp8_trace --shapes trace_llama3-70b-tp8
ab tp8_4k --shapes long_llama3-70b-tp8 --long 4096
ab tp8_chunk512 --shapes chunk512_llama3-70b-tp8
ab l8_trace --shapes trace_llama3-8b
cat $W/rc.txt
grep -h -o '"max_abs_diff": [0-9.e-]*' $W/*.log | sort | uniq -c
cd $OUT && tar -czf w.tgz w
