#!/usr/bin/env bash
# Call B (after X, same lease: the peers stay unpacked; carry [".peers/manifest.json", ".devcache_bench"]): issue 25's
# sinks / ALiBi / variant entries of gpt-oss and gemma2-9b with FA4 and FlexAttention (one process a preset: the
# entries carry its suffix), on the commit with option "x" by default.
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
for M in gpt-oss gemma2-9b; do
  T=$(( 540 - SECONDS )); [ $T -gt 40 ] || break
  timeout $T python3 -m kernelgen bench --flex some --budget 0 --json $W/variants_$M.json --suite prefill,decode \
    --model $M --only 'sinks_*,alibi_*,variant_*' > $W/variants_$M.log 2>&1
  echo "variants $M rc $? at $SECONDS" >> $W/rc.txt
done
kill $WD; cd $OUT && tar -czf w.tgz w
