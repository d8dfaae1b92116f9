#!/usr/bin/env bash
# call B: FA3 FP8 beside the FP8 prefill entries (three presets, Llama 3 twice); ncu Gemma 2's 4 x 4k FP8 against FA3
set -u
W=$OUT/w; mkdir -p $W
( sleep 505; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $?" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
run_bench() { T=$(( 490 - SECONDS )); [ $T -lt 40 ] && return
  timeout $T python3 -m kernelgen bench --suite prefill --model $1 --only 'fp8_prefill*' --json $W/bench_$1_$2.json > $W/bench_$1_$2.log 2>&1
  echo "bench $1 $2 rc $?" >> $W/rc.txt; clk; }
run_bench llama3-8b 1
run_bench gemma2-9b 1
for impl in kernelgen fa3; do
  T=$(( 490 - SECONDS )); [ $T -lt 60 ] && break
  timeout 100 ncu --profile-from-start off --clock-control none --section SpeedOfLight --section WarpStateStats --section InstructionStats --section Occupancy --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --csv -k regex:"kg_attention_fwd|device_kernel" python3 benchmarks/experiments/profile_vs_peers.py --impl $impl --shapes fp8_gemma2_4k > $W/ncu_gemma2_$impl.csv 2> $W/ncu_gemma2_$impl.err
  echo "ncu $impl rc $?" >> $W/rc.txt
done
run_bench gpt-oss 1
run_bench llama3-8b 2
run_bench gemma2-9b 2
kill $WD; cd $OUT && tar -czf w.tgz w
