#!/usr/bin/env bash
# call 3: GPU tests of the fused FP8 registers; FA3 FP8 peers; KG_VT_HOIST A/B; FP8 bench entries; mixed suite
set -u
W=$OUT/w; mkdir -p $W
( sleep 575; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $?" >> $W/rc.txt
[ $? ] && export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
python3 -c "import flash_attn_interface" >> $W/rc.txt 2>&1 && echo "fa3 import ok" >> $W/rc.txt
timeout 170 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_fused_gpu.py tests/gpu/test_fp8_gpu.py -m gpu > $W/tests_fp8_fused.log 2>&1
echo "tests rc $?" >> $W/rc.txt; tail -2 $W/tests_fp8_fused.log >> $W/rc.txt; clk
timeout 150 python3 benchmarks/experiments/tile_ab.py --shapes c16k=1:16384:32:8:128:1,c4k=4:4096:32:8:128:1,nc4k=4:4096:32:8:128:0 --passes 3 --configs p=fp8q:128:128:224:2:p,h=fp8q:128:128:224:2:p:KG_VT_HOIST,fa3fp8=fa3fp8 > $W/tile_ab_hoist.log 2>&1
echo "tile_ab rc $?" >> $W/rc.txt; clk
timeout 90 python3 -m kernelgen bench --suite mixed --only 'mixed_trace*' --json $W/bench_mixed.json > $W/bench_mixed.log 2>&1
echo "mixed rc $?" >> $W/rc.txt; clk
for m in llama3-8b gemma2-9b; do
  T=$(( 555 - SECONDS )); [ $T -lt 40 ] && break
  timeout $T python3 -m kernelgen bench --suite prefill,decode --model $m --only 'fp8_*' --json $W/bench_$m.json > $W/bench_$m.log 2>&1
  echo "bench $m rc $?" >> $W/rc.txt; clk
done
kill $WD; cd $OUT && tar -czf w.tgz w
