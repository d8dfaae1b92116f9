#!/usr/bin/env bash
# (next session, the second call of the peers' two-call recipe: the first carries .peers/manifest.json + part1 and runs
# `python3 tools/peer_wheels.py install --dir .peers` (rc 3 keeps part1); this one carries manifest + part2)
# The decode suite with FA3 / FA4 beside at the minimum split share (300ea86+): llama3-8b and llama3-70b-tp8, including
# the Azure entry; then the scheduler's per-kernel time on a small tp8 batch whose schedule the floor leaves alone
# (section "Thirty-sixth session": 0.3-1.6 us slower than 2bbd70c's scheduler there).
set -u
W=$OUT/w; mkdir -p $W
( sleep 330; cd $OUT && tar -czf w.tgz w ) & WD=$!
clk() { nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,noheader >> $W/clocks.txt; }
clk
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers2.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers2.log)"
timeout 250 python3 -m kernelgen bench --suite decode --model llama3-8b,llama3-70b-tp8 --flex off --budget 0 --json $W/bench_decode.json > $W/bench_decode.log 2>&1
echo "bench rc $? at $SECONDS" >> $W/rc.txt; clk
mkdir -p /tmp/o2 && git archive 2bbd70c templates 2>/dev/null | tar -x -C /tmp/o2 || echo "no git here: carry 2bbd70c's templates as .s37/o2/templates" >> $W/rc.txt
O=/tmp/o2/templates; [ -d $O ] || O=.s37/o2/templates
T=$(( 320 - SECONDS )); [ $T -gt 20 ] && { timeout $T python3 benchmarks/experiments/decode_ab.py --configs new=.,old=$O,new2=.,old2=$O \
  --shapes 8x1024,16x2048,64x512 --models llama3-70b-tp8 --caches bf16 --passes 3 --json $W/sched_cost.json > $W/sched_cost.log 2>&1; echo "sched cost rc $? at $SECONDS" >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
