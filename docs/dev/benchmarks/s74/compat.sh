#!/usr/bin/env bash
# Seventy-fourth session (carry [".xd"]), any Hopper GPU: the FA3 compat GPU test file (flash_attn_combine's new
# test among them) with N pytest-xdist workers (default 4), T s in all (default 240).
set -u
W=$OUT/w; mkdir -p $W
T=${T:-240}; N=${N:-4}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
python3 -m pip install --no-index --no-deps --target /tmp/xd .xd/*.whl > $W/xd.log 2>&1 && export PYTHONPATH="$PYTHONPATH:/tmp/xd" || N=0
( sleep $T; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
timeout $(( T - 10 - SECONDS )) python3 -m pytest tests/gpu/test_ops_compat_gpu.py -m gpu -n $N -v -rf -p no:cacheprovider \
  > $W/compat.log 2>&1; echo "compat pytest rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 3 $W/compat.log; grep -hE "^FAILED|^ERROR" $W/compat.log | head
cd $OUT && tar -czf w.tgz w
