#!/usr/bin/env bash
# (next session) the fused mixed launches' split-KV combine at 1 / 2 / 8 warps a row against today's 4
# (choose_fused_hopper takes no rows: CombineSpec.row_warps stays 4 there); one process, interleaved replays
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 300 python3 benchmarks/experiments/mixed_sweep.py --cases bench,long,short --short-ctas 44 \
  --combine-row-warps 4,1,2,8 --rounds 5 --json $W/mixed_rw.json > $W/mixed_rw.log 2>&1
echo "mixed rw rc $? at $SECONDS" >> $W/rc.txt
