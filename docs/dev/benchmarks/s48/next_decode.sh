#!/usr/bin/env bash
# Next lease (no carry; about 250 s): the sm_80 tiles' softmax keeping a warp's row max until a row's new
# max exceeds it by more than 2^8 (benchmarks/experiments/patches/lazy_max_sm80.patch, KG_LAZY_MAX=8: no O
# rescale and no correction exponentials on most key blocks; the FP8 decode tile's loop 472 -> ~418
# instructions a 16-key block on its taken path), against the checkout's templates on the bench's decode
# batches (decode_ab.py, interleaved graph replays, two passes), FP8 and bf16 caches.  Read the bf16 rows
# with care: the patch takes the bf16 decode kernel from 168 to 177 registers (12 -> 11 one-warp CTAs an
# SM), the FP8 one stays at 166 (12 an SM both ways).
# TESTS=1 (a call of its own, about 280 s, T seconds): only the decode / FP8 / sm_80 / sinks GPU tests with
# the winning patches (PATCHES, names without .patch; default lazy_max_sm80) applied to the checkout
# (taken back afterwards).
set -u
export PYTHONPATH=$PWD
mkdir -p $OUT
if [ "${TESTS:-0}" = 1 ]; then   # PATCHES: the ones that won (default: the lazy max)
  PATCHES=${PATCHES:-lazy_max_sm80}
  for P in $PATCHES; do git apply benchmarks/experiments/patches/$P.patch || exit 1; done
  timeout ${T:-300} python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_paged_decode_gpu.py tests/gpu/test_fp8_gpu.py tests/gpu/test_attention_gpu.py tests/gpu/test_sinks_gpu.py \
    > $OUT/tests_decode.log 2>&1
  echo "tests ($PATCHES) rc $? at $SECONDS" >> $OUT/rc.txt
  for P in $PATCHES; do git apply -R benchmarks/experiments/patches/$P.patch; done
  tail -3 $OUT/tests_decode.log; cat $OUT/rc.txt
  exit 0
fi
# three patched folders: lazy (the lazy max), ahead (patches/page_ahead_sm80.patch: the page id of the block
# the loop loads next read one iteration early, once for K and V, so that no cp.async waits on a page-table
# load), both
R=$PWD
mk() {  # PATCH... -> a templates folder with them applied
  local T=$(mktemp -d); cp -r templates $T/
  for P in "$@"; do (cd $T && { patch -p1 -s -t < $R/benchmarks/experiments/patches/$P.patch || git apply $R/benchmarks/experiments/patches/$P.patch; }); done
  echo $T/templates
}
L=$(mk lazy_max_sm80); A=$(mk page_ahead_sm80); B=$(mk lazy_max_sm80 page_ahead_sm80)
timeout 270 python3 benchmarks/experiments/decode_ab.py --configs head=.,lazy=$L,ahead=$A,both=$B --passes 2 \
  --shapes decode_trace_b128_paged16,decode_long_b8_128k,decode_trace_b32_paged16 --models llama3-8b,llama3-70b-tp8 \
  --caches e4m3,bf16 --json $OUT/lazy_ab.json > $OUT/lazy_ab.log 2>&1
echo "ab rc $? at $SECONDS" >> $OUT/rc.txt
cat $OUT/rc.txt; tail -14 $OUT/lazy_ab.log
