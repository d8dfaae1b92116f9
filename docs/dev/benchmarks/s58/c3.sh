#!/usr/bin/env bash
# Fifty-eighth session (carry [".devcache"]): the GPU suite of the committed code (tools/gpu_check.sh
# tests, pytest limit P s, default 420), then the num_splits cap's timing (splits_cap.py) in what is
# left of T s.  Results in $OUT/w (w.tgz).
set -u
T=${T:-585}; P=${P:-420}
mkdir -p $OUT/w
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $OUT/w/gpu.txt
OUT=$OUT/w PYTEST_LIMIT=$P timeout $(( T - 60 )) bash tools/gpu_check.sh tests > $OUT/w/check.log 2>&1; echo "tests rc $? at $SECONDS" >> $OUT/w/rc.txt
OUT=$OUT/w PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache timeout $(( T - 8 - SECONDS )) python3 docs/dev/benchmarks/s58/splits_cap.py 5 > $OUT/w/splits.log 2>&1
echo "splits rc $? at $SECONDS" >> $OUT/w/rc.txt
cat $OUT/w/gpu.txt $OUT/w/rc.txt; tail -3 $OUT/w/pytest.log; grep -E "^FAILED|Error" $OUT/w/pytest.log | head -20; cat $OUT/w/splits.log | tail -8
cd $OUT && tar -czf w.tgz w
