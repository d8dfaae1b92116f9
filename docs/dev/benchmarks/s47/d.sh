#!/usr/bin/env bash
# Call D (carry [".devcache_bench"]; no peers): the cost entries at gpt-oss's heads with the bench's twins
# (apps/bench/twins.py: each call also timed with its kernels loaded again as other modules), in two processes.
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
for i in 1 2; do
  timeout 200 python3 -m kernelgen bench --flex off --budget 0 --json $W/cost_$i.json --suite prefill \
    --model gpt-oss --only 'alibi_prefill_causal_*,variant_alibi_prefill_*,sinks_prefill_causal_*' > $W/cost_$i.log 2>&1
  echo "cost $i rc $? at $SECONDS" >> $W/rc.txt
done
cd $OUT && tar -czf w.tgz w
