#!/usr/bin/env bash
# Fifty-seventh session, call 1 (carry [".devcache"], built for this commit): the GPU suite of the
# committed code (tools/gpu_check.sh tests, its default 420 s pytest limit).  Results in $OUT/w (w.tgz).
set -u
mkdir -p $OUT/w
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $OUT/w/gpu.txt
OUT=$OUT/w timeout 580 bash tools/gpu_check.sh tests > $OUT/w/check.log 2>&1; echo "tests rc $? at $SECONDS" >> $OUT/w/rc.txt
cat $OUT/w/gpu.txt $OUT/w/rc.txt; tail -3 $OUT/w/pytest.log; grep -E "^FAILED|Error" $OUT/w/pytest.log | head -20
cd $OUT && tar -czf w.tgz w
