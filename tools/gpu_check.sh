#!/usr/bin/env bash
# One call on a GPU machine: GPU tests, the demo and the benchmarks.
# Logs and gpu_report.json go to $OUT (default ./gpu_out); the summary table is printed last.
# Usage: OUT=/tmp/out bash tools/gpu_check.sh [tests|bench|all|reliability|full-bench]
#   tests: warm the cache and run the GPU tests (junit.xml, pytest.log)
#   bench: the demo, compare-layouts and the benchmarks (demo.json, compare.json, bench.json)
#   all (default): both, then gpu_report.json / h200.md and the summary table
#   reliability: the 2000-batch numerical fuzz (fuzz.json; seed $FUZZ_SEED, default the carried
#     .devcache's seed, else 1: tools/device_cache.py build --fuzz-seed compiles that seed's kernels
#     ahead) and compute-sanitizer memcheck/racecheck
#   full-bench: the bench part with `kernelgen bench --suite all` for every preset instead of the
#     llama3-8b run (bench.json, bench_all.md; BENCH_DTYPE=all adds the fp16 entries: `--dtype`); FA3 and FA4 are measured when .peers/ came along
#     (tools/peer_wheels.py).  No plots on the device (a call brings back at most 8 files): draw them
#     here with `kernelgen bench --from-json bench.json --plots DIR`.
# Parts can be combined with commas (e.g. all,reliability).
# (tests and bench fit one 10-minute device call each; tools/gpu_report.py merges their folders.)
# Each stage has its own time limit so a hang in one still leaves the others' results.
# The device's copy of the tree may carry stale git metadata (a run of 39c4233 reported 43ec5e7):
# regenerate the report here with KERNELGEN_COMMIT=$(git rev-parse HEAD) tools/gpu_report.py.
set -uo pipefail
cd "$(dirname "$0")/.."
PART=",${1:-all},"
has() { case "$PART" in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
OUT="${OUT:-$PWD/gpu_out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KERNELGEN_CACHE_DIR="${KERNELGEN_CACHE_DIR:-$PWD/cache}"
export KERNELGEN_TEST_CACHE_DIR="$KERNELGEN_CACHE_DIR"
PY="${PYTHON:-python3}"
LOG="$OUT/run.log"
touch "$LOG"
step() { echo "=== $* ($(date +%T))" | tee -a "$LOG"; }

# Kernels compiled on a CPU machine before the call (tools/device_cache.py build; carry .devcache):
# into the cache first, so the warm-ups, the fuzz's prewarm and the bench's find them compiled.
if [ -f .devcache/manifest.json ]; then
  step devcache
  timeout 120 "$PY" tools/device_cache.py unpack --dir .devcache --cache-dir "$KERNELGEN_CACHE_DIR" >> "$LOG" 2>&1
  echo "devcache unpack exit $?" >> "$LOG"
  # the fuzz below runs the seed whose kernels came along, unless FUZZ_SEED says otherwise
  FUZZ_SEED="${FUZZ_SEED:-$("$PY" -c 'import json; print(json.load(open(".devcache/manifest.json")).get("fuzz_seed") or 1)' 2>/dev/null || echo 1)}"
fi

# The benchmark's FA3 / FA4 peers, when their parts travelled with this call or an earlier call of the
# same lease (tools/peer_wheels.py: the two-call recipe).  Without them the peers are reported unavailable.
if [ -f .peers/manifest.json ]; then
  step peers
  if timeout 120 "$PY" tools/peer_wheels.py install --dir .peers > "$OUT/peers.log" 2>&1; then
    export PYTHONPATH="$PYTHONPATH:$(tail -n 1 "$OUT/peers.log")"
  fi
  cat "$OUT/peers.log" >> "$LOG"
fi

if has tests || has all; then
  step doctor;  timeout 60 "$PY" -m kernelgen doctor >> "$LOG" 2>&1
  step warmup;  timeout 120 "$PY" -m kernelgen warmup --serving --jobs "$(nproc)" >> "$LOG" 2>&1
  # the Hopper GPU tests' kernels, compiled in parallel (the tests would compile them one by one)
  timeout 210 "$PY" tools/warm_gpu_tests.py --jobs "$(nproc)" >> "$LOG" 2>&1
  step pytest
  # -v: one line a test as it starts, so a test that hangs (a kernel that never returns) is the log's
  # last line when the time limit stops pytest (exit 124)
  # PYTEST_WORKERS=6 with pytest-xdist importable (docs/dev/benchmarks/s68/tests.sh carries its wheels): the
  # tests in 6 processes sharing the GPU, about 2 minutes instead of 15 (0, the default: one process)
  timeout "${PYTEST_LIMIT:-420}" "$PY" -m pytest tests -m gpu -n "${PYTEST_WORKERS:-0}" -v -rf -p no:cacheprovider \
    --junitxml="$OUT/junit.xml" > "$OUT/pytest.log" 2>&1
  rc=$?
  echo "pytest exit $rc" >> "$LOG"
  [ $rc -eq 124 ] && echo "pytest stopped by its time limit during: $(tail -n 1 "$OUT/pytest.log")" | tee -a "$LOG"
  tail -n 3 "$OUT/pytest.log" | tee -a "$LOG"
fi
if has bench || has all || has full-bench; then
  step demo;    timeout 90 "$PY" -m kernelgen demo --json "$OUT/demo.json" >> "$LOG" 2>&1
  step compare-layouts
  timeout 60 "$PY" -m kernelgen compare-layouts --batch 5 --pad-to 16 --graph --json "$OUT/compare.json" >> "$LOG" 2>&1
  if has full-bench; then
    step full-bench   # every suite and preset, FlexAttention where it compiles in time
    timeout 480 "$PY" -m kernelgen bench --suite all --dtype "${BENCH_DTYPE:-bf16,e4m3}" --json "$OUT/bench.json" \
      > "$OUT/bench_all.md" 2>> "$LOG"
    echo "full-bench exit $?" >> "$LOG"
  else
    step bench;   timeout 300 "$PY" tools/bench.py --budget 240 --json "$OUT/bench.json" >> "$LOG" 2>&1
  fi
fi
if has reliability; then
  step fuzz;     timeout 420 "$PY" tools/fuzz.py --batches 2000 --seed "${FUZZ_SEED:-1}" --time-limit 400 --json "$OUT/fuzz.json" \
    > "$OUT/fuzz.log" 2>&1
  echo "fuzz exit $?" >> "$LOG"; tail -n 2 "$OUT/fuzz.log" | tee -a "$LOG"
  step sanitize; OUT="$OUT" timeout 300 bash tools/sanitize.sh >> "$LOG" 2>&1
  echo "sanitize exit $?" >> "$LOG"
fi
step report
"$PY" tools/gpu_report.py --out "$OUT" --markdown "$OUT/h200.md" --parts "${1:-all}"
