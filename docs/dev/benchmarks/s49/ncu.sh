#!/usr/bin/env bash
# st.sh's ncu part alone (the kernel's name is kg_attention_fwd).  No carry; about 30 s.
set -u
export PYTHONPATH=$PWD
W=$OUT/w; mkdir -p $W
timeout 200 ncu --profile-from-start off --clock-control none --kernel-name kg_attention_fwd \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  --section Occupancy --section WarpStateStats --section SchedulerStats --csv --page details \
  python3 benchmarks/experiments/profile_vs_peers.py --impl kernelgen \
  --shapes decode_b128,fp8_decode_b128,decode_long,fp8_decode_long > $W/ncu.csv 2> $W/ncu.err
echo "ncu rc $? at $SECONDS" >> $W/rc.txt
cat $W/rc.txt
cd $OUT && tar -czf w.tgz w
