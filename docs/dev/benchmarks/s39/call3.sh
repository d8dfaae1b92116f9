#!/usr/bin/env bash
# session 39 call 3: the paged prefill A/B at pages 8-128 (base = HEAD's templates; new = this tree; nb8 = four
# warps only at 8+ boxes a block, i.e. pages of 16 and below), then the 2000-batch fuzz
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 130 python3 benchmarks/experiments/paged_prefill_ab.py --pages 16,8,32,64,128 --passes 2 \
  --configs base=128:128:2:p:.s39/base/templates,new=128:128:2:p,nb8=128:128:2:p::KG_TMA_WARPS_MIN_NB=8 \
  > $W/paged_ab.log 2>&1
echo "paged_ab rc $? at $SECONDS" >> $W/rc.txt
T=$(( 545 - SECONDS ))
timeout $T python3 tools/fuzz.py --batches 2000 --seed 40 --jobs 12 --time-limit $(( T - 15 )) --json $W/fuzz.json > $W/fuzz.log 2>&1
echo "fuzz rc $? at $SECONDS" >> $W/rc.txt; tail -2 $W/fuzz.log >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w
