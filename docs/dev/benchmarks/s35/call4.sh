#!/usr/bin/env bash
# s35 call D: the combine with row_warps (one warp a row on big decode batches, eight on one-KV-head ones, reordered
# load chain): GPU tests of the combine paths, then A/B in one process (old template at 4 warps a row, new at 4, new auto)
set -u
W=$OUT/w; mkdir -p $W
( sleep 540; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
timeout 200 python3 -m pytest -q -x tests/gpu/test_paged_decode_gpu.py tests/gpu/test_sinks_gpu.py -p no:cacheprovider > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt
T=$(( 420 - SECONDS ))
timeout $T python3 benchmarks/experiments/decode_ab.py --configs old=.s35/oldt/templates@rw4,new4=.@rw4,auto=. \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16,decode_long_b8_128k --models llama3-8b,llama3-70b-tp8 \
  --caches bf16 --passes 1 --json $W/ab.json > $W/ab.log 2>&1; echo "ab rc $? at $SECONDS" >> $W/rc.txt
T=$(( 480 - SECONDS )); [ $T -gt 20 ] && { timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-8b --shapes decode_azure_b128_paged16,decode_trace_b32_paged16 --iters 30 > $W/prof8b.log 2>&1; echo "prof rc $? at $SECONDS" >> $W/rc.txt; }
timeout 60 ncu --clock-control none --kernel-name kg_scheduler --launch-skip 6 --launch-count 1 --section SourceCounters --section WarpStateStats \
  --page source --print-source sass --csv python3 .s35/sched_drive.py decode_azure_b128_paged16 8 > $W/ncu_sched_src.csv 2> $W/ncu_sched_src.err; echo "ncu src rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w
