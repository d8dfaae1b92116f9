#!/usr/bin/env bash
# peers part 2 (FA3 installed): the pack-GQA threshold sweep, then FA3's source view on issue 22's shapes behind
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 60 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache0.log 2>&1
timeout 150 python3 benchmarks/experiments/pack_gqa_ab.py --passes 2 \
  --shapes chunk512_llama3-8b,chunk1024_llama3-8b,chunk1536_llama3-8b,chunk_llama3-8b,trace_llama3-8b,chunk512_llama3-70b-tp8,chunk1024_gpt-oss \
  --json $W/pack_sweep.json > $W/pack_sweep.log 2>&1
echo "pack sweep rc $? at $SECONDS" >> $W/rc.txt
bash .s43/src.sh fa3 $(( 440 - SECONDS )) "$@"
