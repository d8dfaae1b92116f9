#!/usr/bin/env bash
# s35 call C: ncu of the scheduler and the combine inside decode calls (cold caches: default cache control; warm: none)
set -u
W=$OUT/w; mkdir -p $W
( sleep 500; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
S=decode_azure_b128_paged16
SEC="--section SpeedOfLight --section WarpStateStats --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis"
timeout 120 ncu --clock-control none --kernel-name regex:"kg_scheduler|kg_combine" --launch-skip 10 --launch-count 2 $SEC \
  python3 .s35/sched_drive.py $S 8 > $W/ncu_cold.txt 2>&1; echo "ncu cold rc $? at $SECONDS" >> $W/rc.txt
timeout 120 ncu --clock-control none --cache-control none --kernel-name regex:"kg_scheduler|kg_combine" --launch-skip 10 --launch-count 2 $SEC \
  python3 .s35/sched_drive.py $S 8 > $W/ncu_warm.txt 2>&1; echo "ncu warm rc $? at $SECONDS" >> $W/rc.txt
timeout 120 ncu --clock-control none --cache-control none --kernel-name regex:"kg_attention_fwd" --launch-skip 5 --launch-count 1 --set full \
  python3 .s35/sched_drive.py $S 8 > $W/ncu_attn.txt 2>&1; echo "ncu attn rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w
