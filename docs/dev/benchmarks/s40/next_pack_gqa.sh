#!/usr/bin/env bash
# (next session) Pack-GQA on the Hopper prefill kernel: its first GPU run (built in the fortieth session on
# the CPU, off by default).  Before the call, on the CPU (NVRTC 13.0 here = the device's):
#   find cache -type f ! -name README.md -delete
#   python tools/warm_gpu_tests.py --only pack --jobs 2 --cache-dir $PWD/cache      (the GPU tests' packed
#       kernels, about 50, 10 MB; the A/B's and the sanitizer cases' kernels compile on the device)
# then carry ["cache"].  About 250 s.
set -u
W=$OUT/w; mkdir -p $W/san
( sleep 280; cd $OUT && tar -czf w.tgz w ) & WD=$!
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache KERNELGEN_TEST_CACHE_DIR=$PWD/cache
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_hopper_pack_gqa_gpu.py \
  --junitxml=$W/junit.xml > $W/tests.log 2>&1; echo "tests rc $? at $SECONDS" >> $W/rc.txt; tail -3 $W/tests.log >> $W/rc.txt
timeout 110 python3 benchmarks/experiments/pack_gqa_ab.py \
  --shapes trace_llama3-8b,trace_llama3-70b-tp8,trace_gpt-oss,long_gpt-oss,chunk_llama3-8b --json $W/pack_ab.json \
  > $W/pack_ab.log 2>&1; echo "ab rc $? at $SECONDS" >> $W/rc.txt
T=$(( 270 - SECONDS )); [ $T -gt 50 ] && { OUT=$W/san timeout $T bash tools/sanitize.sh > $W/sanitize.log 2>&1;
  echo "sanitize rc $? at $SECONDS" >> $W/rc.txt; grep -E "errors:|hopper_pack" $W/sanitize.log >> $W/rc.txt; }
kill $WD; cd $OUT && tar -czf w.tgz w
