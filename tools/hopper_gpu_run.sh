#!/usr/bin/env bash
# One GPU call for the Hopper path: smoke (every mainloop variant in its own process), the Hopper
# GPU tests with the first variant that passed, then the benchmark; each stage gets what is left
# of a total budget (BUDGET seconds, default 190) so a hang still leaves the earlier results.
# Logs go to $OUT; a summary is printed last.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_out}"; mkdir -p "$OUT"
BUDGET="${BUDGET:-190}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KERNELGEN_CACHE_DIR="${KERNELGEN_CACHE_DIR:-$PWD/cache}" KERNELGEN_TEST_CACHE_DIR="${KERNELGEN_CACHE_DIR:-$PWD/cache}"
PY="${PYTHON:-python3}"
left() { local l=$(( BUDGET - SECONDS )); [ "$l" -gt "$1" ] && echo "$1" || echo $(( l > 5 ? l : 5 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv > "$OUT/smi.txt" 2>&1
echo "=== smoke ($SECONDS s)"
timeout "$(left 70)" "$PY" tools/hopper_smoke.py --all --limit 12 --json "$OUT/smoke.json" > "$OUT/smoke.log" 2>&1
OPTS=$("$PY" -c "import json;print(json.load(open('$OUT/smoke.json'))['best_opts'])" 2>/dev/null || echo NONE)
echo "best opts: '$OPTS'"
VARS="_:2,h:2,p:2,hp:2,s:2,_:3,_:2:192,p:2:192"
[ "$OPTS" = "NONE" ] && VARS=""
echo "=== bench ($SECONDS s)"
timeout "$(left 50)" "$PY" tools/bench_hopper.py --json "$OUT/bench.json" --variants "$VARS" --repeat 8 > "$OUT/bench.log" 2>&1
echo "bench exit $? ($SECONDS s)"
if [ "$OPTS" != "NONE" ]; then
  echo "=== pytest ($SECONDS s)"
  KERNELGEN_SM90_OPTS="$OPTS" timeout "$(left 120)" "$PY" -m pytest tests/gpu/test_hopper_gpu.py -q -rf \
    -p no:cacheprovider --timeout 40 > "$OUT/pytest.log" 2>&1
  echo "pytest exit $? ($SECONDS s)"
fi
echo "=== summary"
cat "$OUT/smi.txt"
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
tail -n 25 "$OUT/pytest.log" 2>/dev/null
tail -n 30 "$OUT/bench.log"
