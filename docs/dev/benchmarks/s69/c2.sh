#!/usr/bin/env bash
# Sixty-ninth session (carry [".xd"]): s69/ab.sh (no peers: kernelgen's configurations only), then the FP8 and
# soft-cap GPU test files on the checkout's templates (s68/tests.sh), T s in all (default 570).
set -u
T=${T:-570}
L=340 bash docs/dev/benchmarks/s69/ab.sh
mv $OUT/w/rc.txt $OUT/w/rc_ab.txt; mv $OUT/w/gpu.txt $OUT/w/gpu_ab.txt
T=$(( T - SECONDS )) FILES="tests/gpu/test_fp8_mma_gpu.py tests/gpu/test_fp8_gpu.py tests/gpu/test_softcap_gpu.py tests/gpu/test_sinks_gpu.py tests/gpu/test_mask_split_gpu.py" \
  WARM=120 bash docs/dev/benchmarks/s68/tests.sh
