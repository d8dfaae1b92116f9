#!/usr/bin/env bash
# session 39 call 4 (peers call A): the paged prefill A/B (call 3's failed on the config parse), then peers part 1
set -u
W=$OUT/w; mkdir -p $W
( sleep 300; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 150 python3 benchmarks/experiments/paged_prefill_ab.py --pages 16,8,32,64,128 --passes 2 \
  --configs base=128:128:2:p:.s39/base/templates,new=128:128:2:p,nb8=128:128:2:p::KG_TMA_WARPS_MIN_NB=8 \
  > $W/paged_ab.log 2>&1
echo "paged_ab rc $? at $SECONDS" >> $W/rc.txt
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
kill $WD; cd $OUT && tar -czf w.tgz w
