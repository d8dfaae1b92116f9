#!/usr/bin/env bash
# One GPU call for the Hopper head dims 96/192/256/192x128 (issue 5): parallel warm-up of the
# kernels, the new GPU tests (d96 last, in their own process: a hang there keeps the rest), the
# d 256 benchmark against cuDNN SDPA, torch FA2 and the sm_80 path, the existing Hopper GPU tests.
# Logs in $OUT; a summary last.  BUDGET seconds in all (default 190).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_out}"; mkdir -p "$OUT"
BUDGET="${BUDGET:-190}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KERNELGEN_CACHE_DIR="${KERNELGEN_CACHE_DIR:-$PWD/cache}" KERNELGEN_TEST_CACHE_DIR="${KERNELGEN_CACHE_DIR:-$PWD/cache}"
PY="${PYTHON:-python3}"
left() { local l=$(( BUDGET - SECONDS )); [ "$l" -gt "$1" ] && echo "$1" || echo $(( l > 5 ? l : 5 )); }
T=tests/gpu/test_hopper_gpu.py
PT=(-q -rf -p no:cacheprovider --timeout 60)
echo "=== warm ($SECONDS s)"; timeout -k 3 "$(left 45)" "$PY" tools/hopper_dims_warm.py 16 > "$OUT/warm.log" 2>&1; echo "warm exit $?"; tail -1 "$OUT/warm.log"
echo "=== wide ($SECONDS s)"; timeout -k 3 "$(left 60)" "$PY" -m pytest "$T" "${PT[@]}" -k "wide and not 96x96" > "$OUT/wide.log" 2>&1; echo "wide exit $?"
echo "=== bench ($SECONDS s)"; timeout -k 3 "$(left 35)" "$PY" tools/bench_hopper.py --shapes prefill_dense_causal_h256_s4k \
  --variants p:2,_:2,p:2:64 --repeat 10 --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1; echo "bench exit $?"
echo "=== old ($SECONDS s)"; timeout -k 3 "$(left 60)" "$PY" -m pytest "$T" "${PT[@]}" -k "not wide and not test_dispatch_automatic" > "$OUT/old.log" 2>&1; echo "old exit $?"
echo "=== d96 ($SECONDS s)"; timeout -k 3 "$(left 40)" "$PY" -m pytest "$T" "${PT[@]}" -k "96x96 or test_dispatch_automatic" > "$OUT/d96.log" 2>&1; echo "d96 exit $?"
echo "=== summary ($SECONDS s)"
for f in wide old d96; do echo "[$f]"; grep -E "passed|failed|FAILED|Error|error" "$OUT/$f.log" | cut -c1-400 | tail -12; done
echo "[bench]"; grep -vE "^\s*$" "$OUT/bench.log" | cut -c1-300 | tail -14
