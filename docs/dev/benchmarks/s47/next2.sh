#!/usr/bin/env bash
# Next lease, call 2 (after next1.sh, same lease; carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]),
# about L s (default 450): FA3 / FA4 installed, then issue 25's sinks / ALiBi / variant entries (cost entries with twins)
# of llama3-8b, gpt-oss and gemma2-9b with FA4 / FlexAttention (--flex some), one process a model, for the report.
set -u
W=$OUT/w; mkdir -p $W
L=${L:-450}
( sleep $L; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
for M in gpt-oss llama3-8b gemma2-9b; do
  T=$(( L - 10 - SECONDS )); [ $T -gt 40 ] || break
  timeout $T python3 -m kernelgen bench --flex some --budget 0 --json $W/variants_$M.json --suite prefill,decode \
    --model $M --only 'sinks_*,alibi_*,variant_alibi_*,variant_softcap_approx_*' > $W/variants_$M.log 2>&1
  echo "variants $M rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w
