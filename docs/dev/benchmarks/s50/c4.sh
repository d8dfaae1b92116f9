#!/usr/bin/env bash
# Fiftieth session, call 4 (no carry): the committed code (FP8 pack bound 6144): the pack-GQA and FP8
# tensor-core GPU tests, then the fuzz (seed 50, lazy compiles) for what time is left.  About 400 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
git log --oneline -1 > $W/commit.txt; nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_hopper_pack_gqa_gpu.py tests/gpu/test_fp8_mma_gpu.py \
  > $W/tests.log 2>&1
echo "tests rc $? at $SECONDS" >> $W/rc.txt
tail -2 $W/tests.log
T=$(( 440 - SECONDS ))
timeout $((T + 60)) python3 tools/fuzz.py --batches 2000 --seed 50 --no-prewarm --time-limit $T --json $W/fuzz.json \
  > $W/fuzz.log 2>&1
echo "fuzz rc $? at $SECONDS" >> $W/rc.txt
tail -6 $W/fuzz.log; cat $W/rc.txt
cd $OUT && tar -czf w.tgz w
