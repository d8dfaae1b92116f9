#!/usr/bin/env bash
# (next session) KERNELGEN_PDL: Programmatic Dependent Launch between a decode call's scheduler ->
# attention -> combine (one CUDA graph, programmatic edges; sm_90a).  Per-kernel times and the call
# time (decode_profile) with KERNELGEN_PDL unset and =1, alternating, two rounds each: llama3-8b
# Azure b128 + trace b32, llama3-70b-tp8 trace b32; then correctness with PDL on: pdl_check.py (the
# graph has programmatic edges; 200 graph launches equal the direct call bit for bit) and the paged
# decode GPU tests.  Compare call_us first: under the profiler a PDL kernel launched early counts
# its griddepcontrol.wait in its own time.
set -u
W=$OUT/w; mkdir -p $W
( sleep 570; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
unset KERNELGEN_PDL
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
KERNELGEN_PDL=1 timeout 150 python3 docs/dev/benchmarks/s35/pdl_check.py llama3-8b decode_azure_b128_paged16,decode_trace_b32_paged16 200 \
  > $W/pdl_check.log 2>&1; echo "pdl_check rc $? at $SECONDS" >> $W/rc.txt
S8=decode_azure_b128_paged16,decode_trace_b32_paged16
S70=decode_trace_b32_paged16
for r in 1 2; do
  for mode in off on; do
    if [ $mode = on ]; then export KERNELGEN_PDL=1; else unset KERNELGEN_PDL; fi
    T=$(( 420 - SECONDS )); [ $T -lt 20 ] && break 2
    timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-8b --shapes $S8 --iters 30 \
      --json $W/p8_${mode}_$r.json > $W/p8_${mode}_$r.log 2>&1; echo "8b $mode $r rc $? at $SECONDS" >> $W/rc.txt
    T=$(( 420 - SECONDS )); [ $T -lt 20 ] && break 2
    timeout $T python3 benchmarks/experiments/decode_profile.py --model llama3-70b-tp8 --shapes $S70 --iters 30 \
      --json $W/p70_${mode}_$r.json > $W/p70_${mode}_$r.log 2>&1; echo "70b $mode $r rc $? at $SECONDS" >> $W/rc.txt
  done
done
unset KERNELGEN_PDL
T=$(( 560 - SECONDS )); [ $T -lt 30 ] && T=30
KERNELGEN_PDL=1 timeout $T python3 -m pytest -q tests/gpu/test_paged_decode_gpu.py -p no:cacheprovider \
  > $W/test_paged_decode_pdl.log 2>&1; echo "paged decode tests (PDL on) rc $? at $SECONDS" >> $W/rc.txt
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader >> $W/clocks.txt
kill $WD; cd $OUT && tar -czf w.tgz w
