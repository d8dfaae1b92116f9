#!/usr/bin/env bash
# One GPU call for the Hopper path, in stages (comma-separated first argument, default
# smoke,tests,bench):
#   smoke   every mainloop variant on small cases, one process per batch of variants (hopper_smoke.py)
#   tests   tests/gpu/test_hopper_gpu.py (the dispatcher's options; KERNELGEN_SM90_OPTS if set)
#   bench   tools/bench_hopper.py on the two prefill shapes (variants: $VARS)
#   regress the existing GPU tests whose calls the dispatcher now sends to the Hopper path
#   fuzz    tools/fuzz.py for at most 30 s (seed 3)
# Each stage gets what is left of a total budget (BUDGET seconds, default 190), capped per stage,
# so a hang still leaves the earlier results.  Logs go to $OUT; a summary is printed last.
set -u
cd "$(dirname "$0")/.."
PART=",${1:-smoke,tests,bench},"
has() { case "$PART" in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
OUT="${OUT:-$PWD/gpu_out}"; mkdir -p "$OUT"
BUDGET="${BUDGET:-190}"
VARS="${VARS:-p:2,_:2,pr:2,r:2,p:3}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KERNELGEN_CACHE_DIR="${KERNELGEN_CACHE_DIR:-$PWD/cache}" KERNELGEN_TEST_CACHE_DIR="${KERNELGEN_CACHE_DIR:-$PWD/cache}"
PY="${PYTHON:-python3}"
left() { local l=$(( BUDGET - SECONDS )); [ "$l" -gt "$1" ] && echo "$1" || echo $(( l > 5 ? l : 5 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/smi.txt" 2>&1
if has smoke; then
  echo "=== smoke ($SECONDS s)"
  timeout "$(left 70)" "$PY" tools/hopper_smoke.py --all --limit 12 --json "$OUT/smoke.json" > "$OUT/smoke.log" 2>&1
fi
if has tests; then
  echo "=== tests ($SECONDS s)"
  timeout "$(left 60)" "$PY" -m pytest tests/gpu/test_hopper_gpu.py -q -rf -p no:cacheprovider --timeout 40 \
    > "$OUT/pytest.log" 2>&1
  echo "tests exit $? ($SECONDS s)"
fi
if has bench; then
  echo "=== bench ($SECONDS s)"
  timeout "$(left 50)" "$PY" tools/bench_hopper.py --json "$OUT/bench.json" --variants "$VARS" --repeat 8 \
    > "$OUT/bench.log" 2>&1
  echo "bench exit $? ($SECONDS s)"
fi
if has regress; then
  echo "=== regress ($SECONDS s)"
  timeout "$(left 80)" "$PY" -m pytest -q -rf -p no:cacheprovider --timeout 60 \
    "tests/gpu/test_attention_gpu.py::test_sort_and_swizzle_change_order_not_result" \
    "tests/gpu/test_attention_gpu.py::test_side_stream_and_cuda_graph" \
    "tests/gpu/test_attention_gpu.py::test_degenerate_batches" \
    "tests/gpu/test_attention_gpu.py::test_custom_scale_and_strided_views" \
    "tests/gpu/test_attention_gpu.py::test_head_dim_v_differs" \
    tests/gpu/test_fused_gpu.py::test_fused_packed_kv_forced_threshold tests/gpu/test_fused_gpu.py::test_unfused_when_switched_off \
    tests/gpu/test_ops_compat_gpu.py::test_varlen_func_equals_native \
    tests/gpu/test_ops_compat_gpu.py::test_with_kvcache_contiguous_cache_equals_native_packed \
    tests/gpu/test_host_path_gpu.py > "$OUT/regress.log" 2>&1
  echo "regress exit $? ($SECONDS s)"
fi
if has fuzz; then
  echo "=== fuzz ($SECONDS s)"
  L=$(left 45)
  timeout "$L" "$PY" tools/fuzz.py --batches 150 --seed 3 --time-limit $(( L > 20 ? L - 15 : 5 )) \
    --json "$OUT/fuzz.json" > "$OUT/fuzz.log" 2>&1
  echo "fuzz exit $? ($SECONDS s)"
fi
echo "=== summary ($SECONDS s)"
cat "$OUT/smi.txt"
if [ -f "$OUT/smoke.json" ]; then
  grep -h "^SMOKE" "$OUT/smoke.log"
  "$PY" - "$OUT/smoke.json" <<'PYEOF' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["variants"]:
    cases = r.get("cases", {})
    errs = " ".join(f"{n}:{c.get('o_max_err', 0):.2g}/{c.get('lse_max_err', 0):.2g}" for n, c in cases.items())
    print(r["variant"], "ok" if r.get("ok") else "FAIL", errs, r.get("error", "")[:300], r.get("hang_check", "")[-800:])
    if not r.get("ok"):
        for n, c in cases.items():
            print("   ", n, {k: c[k] for k in c if k in ("o_max_err", "lse_max_err", "worst_at", "nan_rows_extra",
                                                         "error", "bad_cols_64", "kernel")})
PYEOF
fi
for f in pytest regress; do [ -f "$OUT/$f.log" ] && { echo "--- $f"; grep -E "^(FAILED|ERROR)|passed|failed|Timeout" "$OUT/$f.log" | tail -n 15; }; done
[ -f "$OUT/fuzz.log" ] && { echo "--- fuzz"; tail -n 4 "$OUT/fuzz.log"; }
[ -f "$OUT/bench.log" ] && { echo "--- bench"; grep -v "^resources" "$OUT/bench.log" | tail -n 20; grep "^resources" "$OUT/bench.log" | grep "p:2\]" ; }
