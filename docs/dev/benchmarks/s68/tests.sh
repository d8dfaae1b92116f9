#!/usr/bin/env bash
# Sixty-eighth session, call 1 of a lease (carry nothing, or [".peers/manifest.json", ".peers/part1"] to stash
# the peers' part 1 first, rc 3 expected; add ".xd" to carry: the pytest-xdist and execnet wheels,
# made here with `pip download --no-deps -d .xd pytest-xdist execnet`; without them the tests run in
# one process, about 15 minutes): every GPU test on today's templates (the 16-byte O stores), the
# Hopper tests' kernels compiled first on all cores (tools/warm_gpu_tests.py), then pytest with
# N workers (default 6) sharing the one GPU, so that the kernels the warm-up does not cover compile
# in parallel too.  T s in all (default 570).  FILES: the test paths (default tests, -m gpu).
set -u
W=$OUT/w; mkdir -p $W
T=${T:-570}; N=${N:-6}; FILES=${FILES:-tests}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
python3 -m pip install --no-index --no-deps --target /tmp/xd .xd/*.whl > $W/xd.log 2>&1; x=$?; echo "xdist rc $x at $SECONDS" >> $W/rc.txt
if [ $x = 0 ]; then export PYTHONPATH="$PYTHONPATH:/tmp/xd"; else N=0; fi
[ -d .peers/part1 ] && { timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt; }
[ -f .devcache/manifest.json ] && timeout 60 python3 tools/device_cache.py unpack --dir .devcache > $W/devcache.log 2>&1
timeout ${WARM:-200} python3 tools/warm_gpu_tests.py --jobs "$(nproc)" > $W/warm.log 2>&1; echo "warm rc $? at $SECONDS" >> $W/rc.txt
timeout $(( T - SECONDS )) python3 -m pytest $FILES -m gpu -n $N -v -rf -p no:cacheprovider --junitxml=$W/junit.xml \
  > $W/pytest.log 2>&1; echo "pytest rc $? at $SECONDS" >> $W/rc.txt
cat $W/gpu.txt $W/rc.txt; tail -n 2 $W/warm.log; tail -n 3 $W/pytest.log
grep -hE "^FAILED|^ERROR" $W/pytest.log | head -30
cd $OUT && tar -czf w.tgz w
