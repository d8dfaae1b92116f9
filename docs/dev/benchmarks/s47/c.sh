#!/usr/bin/env bash
# Call C (carry [".devcache_bench"]; no peers): issue 25's ALiBi and soft-cap snippet entries of gpt-oss against their
# built-ins (variant_ratio needs no peer), and the built-in ALiBi / sinks over plain, in two processes: the H100 runs of
# call B had the ALiBi snippet at 1.084 / 1.094x its built-in, where the H200 report has 1.035 (ac4ebcc).
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
for i in 1 2; do
  timeout 100 python3 -m kernelgen bench --flex off --budget 0 --json $W/variants_$i.json --suite prefill \
    --model gpt-oss --only 'variant_alibi_prefill_*,variant_softcap_approx_*,alibi_prefill_causal_*' > $W/variants_$i.log 2>&1
  echo "variants $i rc $? at $SECONDS" >> $W/rc.txt
done
cd $OUT && tar -czf w.tgz w
