#!/usr/bin/env bash
# session 37 call 5: L2 policies, both flush regimes (decode_ab.py: the bench's 256 MB write; readflush_ab.py: a 256 MB read):
# base = HEAD; ef = every cp.async evict_first; el = split-KV partials stored evict_last; elc = el + the combine reading them evict_first
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
C=base=.s37/base/templates,ef=.s37/ef/templates,el=.s37/el/templates,elc=.s37/elc/templates,base2=.s37/base/templates
S=decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16,decode_long_b8_128k
timeout 200 python3 benchmarks/experiments/decode_ab.py --configs $C --shapes $S --models llama3-8b,llama3-70b-tp8 --caches bf16 --passes 2 --json $W/ab_write.json > $W/ab_write.log 2>&1
echo "ab write rc $? at $SECONDS" >> $W/rc.txt
timeout 200 python3 .s37/readflush_ab.py --configs $C --shapes $S --models llama3-8b,llama3-70b-tp8 --caches bf16 --passes 2 --json $W/ab_read.json > $W/ab_read.log 2>&1
echo "ab read rc $? at $SECONDS" >> $W/rc.txt
