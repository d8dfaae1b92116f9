#!/usr/bin/env bash
# Fifty-fifth session, the last lease's second call (carry [".devcache_bench", ".peers/manifest.json", ".peers/part2"]
# after a call that carried ".peers/part1"): ncu --set full of issue 25's gpt-oss soft-cap snippet call (1 x 16k
# causal, 64 / 8 heads, d 64, tanh.approx; profile_vs_peers.py's gptoss_softcap_16k), kernelgen (packed, three
# warpgroups, "m") and FA4 side by side, as the twenty-sixth session's s26/ncu_softcap did before packing and "m".
set -u
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
W=$OUT/w; mkdir -p $W
timeout 30 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/dc.log 2>&1
timeout 100 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
for I in kernelgen fa4; do
  timeout 150 ncu --profile-from-start off --clock-control none --set full --page details \
    python3 benchmarks/experiments/profile_vs_peers.py --impl $I --shapes gptoss_softcap_16k > $W/ncu_$I.txt 2> $W/ncu_$I.err
  echo "$I rc $? at $SECONDS" >> $W/rc.txt
done
cat $W/rc.txt
for I in kernelgen fa4; do echo "== $I"; grep -E "^  [a-z_]|Duration|Compute \(SM\) Throughput|Issue Slots Busy|Registers Per|Executed Ipc Active|No Eligible|Achieved Occupancy" $W/ncu_$I.txt | head -12; done
cd $OUT && tar -czf w.tgz w
