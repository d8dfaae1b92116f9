#!/usr/bin/env bash
# s35 call E: the rolled scheduler (+ the row_warps combine): GPU tests of the scheduler, plans, fused and combine paths;
# A/B in one process: old templates (4 warps a row), new combine + old scheduler (mid), new; per-kernel profile; ncu source
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
timeout 240 python3 -m pytest -q tests/gpu/test_attention_gpu.py tests/gpu/test_plan_gpu.py tests/gpu/test_fused_gpu.py tests/gpu/test_paged_decode_gpu.py -p no:cacheprovider > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt
T=$(( 400 - SECONDS ))
timeout $T python3 benchmarks/experiments/decode_ab.py --configs old=.s35/oldt/templates@rw4,mid=.s35/midt/templates,new=. \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16,decode_long_b8_128k --models llama3-8b,llama3-70b-tp8 \
  --caches bf16 --passes 2 --json $W/ab.json > $W/ab.log 2>&1; echo "ab rc $? at $SECONDS" >> $W/rc.txt
T=$(( 470 - SECONDS )); [ $T -gt 20 ] && { timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-8b --shapes decode_azure_b128_paged16,decode_trace_b32_paged16 --iters 30 > $W/prof8b.log 2>&1; echo "prof8b rc $? at $SECONDS" >> $W/rc.txt; }
T=$(( 500 - SECONDS )); [ $T -gt 20 ] && { timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-70b-tp8 --shapes decode_trace_b32_paged16,decode_long_b8_128k --iters 30 > $W/proftp8.log 2>&1; echo "proftp8 rc $? at $SECONDS" >> $W/rc.txt; }
T=$(( 545 - SECONDS )); [ $T -gt 15 ] && { timeout $T ncu --clock-control none --kernel-name kg_scheduler --launch-skip 6 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --page source --print-source sass --csv python3 .s35/sched_drive.py decode_azure_b128_paged16 8 > $W/ncu_sched_src.csv 2> $W/ncu_sched_src.err; echo "ncu src rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
