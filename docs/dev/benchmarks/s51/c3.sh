#!/usr/bin/env bash
# Fifty-first session, call 3 (no carry, about 450 s): the committed code (ALiBi packs on the 192-row tile
# below SM90_ALIBI_PACK_MAX_MEAN_Q; FP8 d 128 packs by the 128-row rule): the ALiBi, pack-GQA and FP8
# tensor-core GPU tests, the packed / unpacked A/B at the ALiBi bound's neighbours (2k, 8k, 16k non-causal)
# and FP8 d 128 at 1k / 2k, then the fuzz (seed 51, lazy compiles) for what time is left.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_alibi_gpu.py tests/gpu/test_hopper_pack_gqa_gpu.py \
  tests/gpu/test_fp8_mma_gpu.py > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
tail -2 $W/tests.log
AB_UNTIL=330
AB_FLAGS="--alibi --no-sinks"; . docs/dev/benchmarks/s50/pack_ab.sh
ab alibi_8k --shapes long_gpt-oss --long 8192
ab alibi_2k --shapes long_gpt-oss --long 2048
ab alibi_nc16k --shapes long_gpt-oss --long 16384 --no-causal
ab alibi_chunk2048 --shapes chunk2048_gpt-oss
AB_FLAGS="--dtype e4m3"
ab tp8_1k --shapes long_llama3-70b-tp8 --long 1024
ab tp8_2k --shapes long_llama3-70b-tp8 --long 2048
T=$(( 450 - SECONDS ))
timeout $((T + 60)) python3 tools/fuzz.py --batches 2000 --seed 51 --no-prewarm --time-limit $T --json $W/fuzz.json \
  > $W/fuzz.log 2>&1
echo "fuzz rc $? at $SECONDS" >> $W/rc.txt
tail -6 $W/fuzz.log; cat $W/rc.txt
grep -h -o '"max_abs_diff": [0-9.e-]*' $W/*.log | sort | uniq -c
cd $OUT && tar -czf w.tgz w
