#!/usr/bin/env bash
# session 37 call 11: the evict_first hint (ef) against HEAD with attention timed right after what precedes it in a
# decode layer (the previous layer's MLP down projection, this layer's QKV projection; layerflush_ab.py), per model
set -u
W=$OUT/w; mkdir -p $W
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
C=base=.s37/base/templates,ef=.s37/ef/templates,base2=.s37/base/templates,ef2=.s37/ef/templates
S=decode_azure_b128_paged16,decode_trace_b32_paged16,decode_trace_b128_paged16,decode_long_b8_128k
LAYER=8b timeout 150 python3 .s37/layerflush_ab.py --configs $C --shapes $S --models llama3-8b --caches bf16,e4m3 --passes 2 --json $W/ab_layer_8b.json > $W/ab_layer_8b.log 2>&1
echo "8b rc $? at $SECONDS" >> $W/rc.txt
LAYER=tp8 timeout 150 python3 .s37/layerflush_ab.py --configs $C --shapes $S --models llama3-70b-tp8 --caches bf16,e4m3 --passes 2 --json $W/ab_layer_tp8.json > $W/ab_layer_tp8.log 2>&1
echo "tp8 rc $? at $SECONDS" >> $W/rc.txt
