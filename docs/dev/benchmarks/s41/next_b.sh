#!/usr/bin/env bash
# Call B (peers call 2 of 2): FA3 / FA4 installed; the bench entries that have not run with them:
# issue 22's new entries (dense d 96, 192, 192x128; the fp16 copies), the gpt-oss / gemma2 chunked entries
# (from before the paged prefill's four issuing warps), llama3-8b's chunked and mixed entries (the fused
# kernel's four issuing warps, ee99f53); with PACK=1 (pack-GQA paid in call A) also the varlen trace entries
# packed.  carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"].
set -u
W=$OUT/w; mkdir -p $W
( sleep 565; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
bench() {  # name, limit (s since start), bench arguments...
  local n=$1 lim=$2; shift 2; local T=$(( lim - SECONDS ))
  [ $T -gt 40 ] || { echo "$n skipped at $SECONDS" >> $W/rc.txt; return; }
  timeout $T python3 -m kernelgen bench --flex off --budget 0 --json $W/$n.json "$@" > $W/$n.log 2>&1
  echo "$n rc $? at $SECONDS" >> $W/rc.txt
}
bench new_shapes 200 --suite prefill --model llama3-8b --only 'prefill_dense_causal_h96*,prefill_dense_causal_h192*'
bench chunked_mixed 330 --suite prefill,mixed --model llama3-8b --only 'prefill_chunked*,mixed*'
if [ "${PACK:-0}" = 1 ]; then
  KERNELGEN_SM90_PACK_GQA=1 bench packed_varlen 450 --suite prefill --model llama3-8b,llama3-70b-tp8,qwen2.5-7b,gpt-oss \
    --only 'prefill_varlen_trace*'
fi
bench fp16 470 --suite prefill --model llama3-8b --dtype fp16
bench models_chunked 550 --suite prefill --model gpt-oss,gemma2-9b --only 'prefill_chunked*'
kill $WD; cd $OUT && tar -czf w.tgz w
