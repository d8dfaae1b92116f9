#!/usr/bin/env bash
# session 37 call 3: peers part 1 again (call 2 got a fresh machine); call 1's evict-first A/B with the L2 flushed by a read
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 120 python3 tools/peer_wheels.py install --dir .peers > $W/peers1.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
timeout 100 python3 .s37/readflush_ab.py --configs base=.s37/base/templates,ef=.s37/ef/templates,base2=.s37/base/templates,ef2=.s37/ef/templates \
  --shapes decode_azure_b128_paged16,decode_trace_b32_paged16,decode_long_b8_128k --models llama3-8b,llama3-70b-tp8 \
  --caches bf16 --passes 2 --json $W/ab_ef_read.json > $W/ab_ef_read.log 2>&1
echo "ab read rc $? at $SECONDS" >> $W/rc.txt
