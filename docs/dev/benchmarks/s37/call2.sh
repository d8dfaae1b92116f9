#!/usr/bin/env bash
# session 37 call 2: peers part 2; the decode suite (llama3-8b, llama3-70b-tp8) with FA3 / FA4 at HEAD (152d98f);
# then call 1's evict-first A/B again with the L2 flushed by a read (clean lines) instead of a write (dirty lines)
set -u
W=$OUT/w; mkdir -p $W
( sleep 540; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
timeout 90 python3 .s37/readflush_ab.py --configs base=.s37/base/templates,ef=.s37/ef/templates,base2=.s37/base/templates,ef2=.s37/ef/templates \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_long_b8_128k --models llama3-8b,llama3-70b-tp8 \
  --caches bf16 --passes 2 --json $W/ab_ef_read.json > $W/ab_ef_read.log 2>&1
echo "ab read rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
timeout 300 python3 -m kernelgen bench --suite decode --model llama3-8b,llama3-70b-tp8 --flex off --budget 0 --json $W/bench_decode.json > $W/bench_decode.log 2>&1
echo "bench rc $? at $SECONDS" >> $W/rc.txt; clk
kill $WD; cd $OUT && tar -czf w.tgz w
