#!/usr/bin/env bash
# session 38 call 6 (the same lease as call 5, cache/ carried): ncu of the chunked prefill at pages of 16 on the
# row gather (KERNELGEN_SM90_OPTS=gp) with call 5's templates (gather-async-arrive.patch): source counters by SASS line
mkdir -p $OUT/w; export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
KERNELGEN_SM90_OPTS=gp timeout 100 ncu --profile-from-start off --clock-control none -k regex:kg_attention_fwd --section SpeedOfLight \
  --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters --page source --print-source sass --csv \
  python3 benchmarks/experiments/profile_vs_peers.py --shapes chunked_p16 > $OUT/w/src_gather_p16.csv 2> $OUT/w/src_gather_p16.err
KERNELGEN_SM90_OPTS=gp timeout 60 ncu --profile-from-start off --clock-control none -k regex:kg_attention_fwd --section SpeedOfLight \
  --section WarpStateStats --section MemoryWorkloadAnalysis --csv python3 benchmarks/experiments/profile_vs_peers.py --shapes chunked_p16 \
  > $OUT/w/ncu_gather_p16.csv 2>&1
gzip $OUT/w/src_gather_p16.csv
