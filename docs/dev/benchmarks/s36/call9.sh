#!/usr/bin/env bash
# session 36 call 9: the full GPU suite at 300ea86 (min share + FP8 d256 uniform cg)
set -u
W=$OUT/w; mkdir -p $W
( sleep 580; cd $OUT && rm -f w/suite/*.so; tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
OUT=$W/suite PYTEST_LIMIT=440 timeout 575 bash tools/gpu_check.sh tests > $W/suite.log 2>&1
echo "suite rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/suite/pytest.log >> $W/rc.txt
kill $WD; cd $OUT && rm -f w/suite/*.so; tar -czf w.tgz w
