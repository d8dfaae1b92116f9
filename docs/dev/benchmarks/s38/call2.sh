#!/usr/bin/env bash
# session 38 call 2: chunked prefill on pages 16/32/64/128/packed with 2 vs 3 K/V stages at d 128 (paged_ab.py);
# then the GPU suite on the working tree (the L2 evict_first hint on paged one-warp decode tiles).
set -u
W=$OUT/w; mkdir -p $W
( sleep 585; cd $OUT && rm -f w/suite/*.so; tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 130 python3 .s38/paged_ab.py --passes 2 > $W/paged_ab.log 2>&1
echo "paged_ab rc $? at $SECONDS" >> $W/rc.txt
OUT=$W/suite PYTEST_LIMIT=$(( 580 - SECONDS - 110 )) timeout $(( 590 - SECONDS )) bash tools/gpu_check.sh tests > $W/suite.log 2>&1
echo "suite rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/suite/pytest.log >> $W/rc.txt
kill $WD; cd $OUT && rm -f w/suite/*.so; tar -czf w.tgz w
