#!/usr/bin/env bash
# Seventy-first session (carry [".peers/manifest.json", ".peers/part1", ".devcache_bench"]): on an H200 the
# peers' part 1 stashed (rc 3 expected; s70/go200.sh with part 2 next) and issue 24's rows that need no peer
# (mixed_trace_fp8, the FP8 decode rows); on an H100 ncu source counters of the FP8 mixed step's fused kernel
# (bench batch, 33 short-first CTAs: the keys-as-rows FP8 decode loop's executed instructions and stalls)
# and of the standalone FP8 decode call beside it (decode_only). L s in all (default 300).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-300}
( sleep $L; cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
left() { echo $(( L - 10 - SECONDS )); }
if [ -z "${NCU:-}" ] && grep -q H200 $W/gpu.txt; then
  timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
  B="python3 -m kernelgen bench --flex off --budget 0"
  timeout $(left) $B --json $W/mixed.json --suite mixed --dtype e4m3 --model llama3-8b --only mixed_trace_fp8 \
    > $W/mixed.log 2>&1; echo "mixed rc $? at $SECONDS" >> $W/rc.txt
  [ $(left) -gt 30 ] && { timeout $(left) $B --json $W/decode.json --suite decode --dtype bf16,e4m3 --model llama3-8b \
    --only 'fp8_decode_b128_paged16,decode_trace_b128_paged16' > $W/decode.log 2>&1; echo "decode rc $? at $SECONDS" >> $W/rc.txt; }
else
  P=benchmarks/experiments/mixed_profile.py
  S="--section SourceCounters --section WarpStateStats --section SpeedOfLight --section InstructionStats --section MemoryWorkloadAnalysis --section Occupancy"
  for cfg in "fused:kg_attention_fused:fused_k33" "dec:kg_attention_fwd:decode_only"; do
    IFS=: read tag k label <<< "$cfg"
    [ $(left) -gt 40 ] || break
    timeout $(left) ncu --profile-from-start off --clock-control none -k "regex:$k" -c 1 --import-source no $S \
      -o $W/$tag python3 $P --case bench --kv-dtype e4m3 --label $label > $W/$tag.log 2>&1
    echo "ncu $tag rc $? at $SECONDS" >> $W/rc.txt
    ncu -i $W/$tag.ncu-rep --page source --csv --print-source sass > $W/${tag}_sass.csv 2> $W/${tag}_sass.err
    ncu -i $W/$tag.ncu-rep --page details --csv > $W/${tag}_details.csv 2>> $W/${tag}_sass.err
    echo "export $tag rc $? at $SECONDS" >> $W/rc.txt
  done
  rm -f $W/*.ncu-rep; gzip -f $W/*.csv
fi
kill $WD; cat $W/gpu.txt $W/rc.txt; tail -n 3 $W/*.log | cut -c1-250
grep -hE "^\| (mixed_trace_fp8|fp8_decode|decode_trace)" $W/*.log 2>/dev/null | head -8
cd $OUT && tar -czf w.tgz w
