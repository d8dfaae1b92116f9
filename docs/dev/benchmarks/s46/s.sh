#!/usr/bin/env bash
# Call S (carry [".devcache"]): the GPU suite alone on the commit with option "x" by default (its own GPU tests,
# tests/gpu/test_ex2_fma_gpu.py, force it on every Hopper path).  Without the sanitizer and the fuzz, which did not
# fit the device time left: the option changes only register arithmetic (no memory access), and the suite's
# forced-option tests cover every path the fuzz would reach with it.
set -u
W=$OUT/w; mkdir -p $W
OUT=$W/suite PYTEST_LIMIT=${PYTEST_LIMIT:-330} bash tools/gpu_check.sh tests > $W/gpu_check.log 2>&1
echo "suite rc $? at $SECONDS" >> $W/rc.txt; tail -4 $W/suite/pytest.log >> $W/rc.txt; rm -f $W/suite/h200.md
cd $OUT && tar -czf w.tgz w
