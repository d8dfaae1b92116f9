#!/usr/bin/env bash
# session 39 call 2: the GPU suite on the working tree (lean gather + paged TMA boxes from four warps where a
# block has at least 4 boxes)
set -u
W=$OUT/w; mkdir -p $W
( sleep 575; cd $OUT && tar -czf w.tgz w ) & WD=$!
OUT=$W/suite PYTEST_LIMIT=380 bash tools/gpu_check.sh tests > $W/gpu_check.log 2>&1
echo "suite rc $? at $SECONDS" >> $W/rc.txt; tail -4 $W/suite/pytest.log >> $W/rc.txt
rm -f $W/suite/h200.md
kill $WD; cd $OUT && tar -czf w.tgz w
