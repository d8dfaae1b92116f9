#!/usr/bin/env bash
# Fifty-third session, call 3 (carry [".devcache"], built for this commit; about 500 s): the GPU suite of the
# committed defaults (soft-capped and transcendental kernels on three warpgroups with option "m").
set -u
export PYTEST_LIMIT=${PYTEST_LIMIT:-380}
OUT=$OUT/w timeout 480 bash tools/gpu_check.sh tests > /dev/null 2>&1; echo "tests rc $? at $SECONDS" >> $OUT/w/rc.txt
tail -3 $OUT/w/pytest.log; cat $OUT/w/rc.txt
cd $OUT && tar -czf w.tgz w
