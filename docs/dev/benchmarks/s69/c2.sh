#!/usr/bin/env bash
# Sixty-ninth session (carry [".xd"]): s69/ab.sh (no peers: kernelgen's configurations only), then the FP8 and
# soft-cap / mask-split GPU test files on the checkout's templates (s68/tests.sh: the candidate, uniform index
# on non-causal FP8 soft-cap d 256 and with "m", option "m" on causal FP8 tensor-core calls at d 64 / 256), T s in all (default 570).
set -u
T=${T:-570}
mkdir -p $OUT/w; ( sleep $(( T - 8 )); cd $OUT && tar -czf w.tgz w ) > /dev/null 2>&1 & WD=$!   # partial results if the call is cut
L=340 bash docs/dev/benchmarks/s69/ab.sh
mv $OUT/w/rc.txt $OUT/w/rc_ab.txt; mv $OUT/w/gpu.txt $OUT/w/gpu_ab.txt
T=$(( T - SECONDS )) FILES="tests/gpu/test_fp8_mma_gpu.py tests/gpu/test_fp8_gpu.py tests/gpu/test_softcap_gpu.py tests/gpu/test_sinks_gpu.py tests/gpu/test_mask_split_gpu.py" \
  WARM=120 bash docs/dev/benchmarks/s68/tests.sh
kill $WD 2> /dev/null; cd $OUT && tar -czf w.tgz w
