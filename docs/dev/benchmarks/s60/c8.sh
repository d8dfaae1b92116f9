#!/usr/bin/env bash
# Sixtieth session (carry [".devcache"], built for this commit's kernels): the GPU suite of the committed
# code (tools/gpu_check.sh tests, pytest limit P s, default 400), the decode tiles' new L2 prefetch
# included.  Results in $OUT/w (w.tgz).
set -u
P=${P:-400}
mkdir -p $OUT/w
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $OUT/w/gpu.txt
OUT=$OUT/w PYTEST_LIMIT=$P timeout $(( P + 60 )) bash tools/gpu_check.sh tests > $OUT/w/check.log 2>&1; echo "tests rc $? at $SECONDS" >> $OUT/w/rc.txt
cat $OUT/w/gpu.txt $OUT/w/rc.txt; tail -3 $OUT/w/pytest.log; grep -E "^FAILED|Error" $OUT/w/pytest.log | head -20
cd $OUT && tar -czf w.tgz w
