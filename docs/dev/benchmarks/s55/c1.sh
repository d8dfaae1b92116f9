#!/usr/bin/env bash
# Fifty-fifth session, call 1 (carry [".devcache"] built for this commit; about 560 s): the GPU suite of
# the committed code (tools/gpu_check.sh tests) then the fuzz (seed $SEED, default 55) on the same code.  Results in $OUT/w (one w.tgz).
set -u
export PYTEST_LIMIT=${PYTEST_LIMIT:-330}
mkdir -p $OUT/w
OUT=$OUT/w timeout 400 bash tools/gpu_check.sh tests > /dev/null 2>&1; echo "tests rc $? at $SECONDS" >> $OUT/w/rc.txt
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout $((590 - SECONDS)) python3 tools/fuzz.py --batches 2000 --seed ${SEED:-55} --time-limit $((570 - SECONDS)) \
  --json $OUT/w/fuzz.json > $OUT/w/fuzz.log 2>&1
echo "fuzz rc $? at $SECONDS" >> $OUT/w/rc.txt
tail -3 $OUT/w/pytest.log; cat $OUT/w/rc.txt; tail -5 $OUT/w/fuzz.log
cd $OUT && tar -czf w.tgz w
