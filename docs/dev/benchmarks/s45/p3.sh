#!/usr/bin/env bash
# Call P3 (after P2 / D, same lease: FA3 / FA4 are unpacked there; carry [".peers/manifest.json", ".devcache_bench"]):
# issue 25's sinks / ALiBi / variant entries with FA4 and FlexAttention (--flex all: the report lacks FlexAttention on
# the llama3-8b variant entries) and the variant_example_* cost entries; then issue 22's entries (bf16, fp16) with
# option "t" on, while time is left; on t-default.
set -u
W=$OUT/w; mkdir -p $W
( sleep 560; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
T=$(( 330 - SECONDS ))
timeout $T python3 -m kernelgen bench --flex all --budget 0 --json $W/variants.json --suite prefill,decode,compile \
  --model llama3-8b --only 'sinks_*,alibi_*,variant_*' > $W/variants.log 2>&1
echo "variants rc $? at $SECONDS" >> $W/rc.txt
T=$(( 550 - SECONDS ))
[ $T -gt 40 ] && { timeout $T python3 -m kernelgen bench --flex off --budget $(( T - 20 )) --json $W/issue22_t.json \
  --suite prefill --model llama3-8b --dtype bf16,fp16 \
  --only 'prefill_dense_*,prefill_varlen_trace,prefill_varlen_trace_fp16,prefill_chunked_paged*' > $W/issue22_t.log 2>&1
  echo "issue22 rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
