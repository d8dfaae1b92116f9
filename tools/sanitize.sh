#!/usr/bin/env bash
# compute-sanitizer memcheck and racecheck on a representative subset (issue 7 item 4):
# `tools/fuzz.py --sanitize-subset` runs one tiny case per kernel family once -- causal prefill on
# packed K/V, a mid tile (aos metadata), paged decode with pack-GQA and forced split-KV (the combine
# kernel), paged decode with automatic split, sliding window + softcap (packed + seqused_k), a
# causal window on paged K/V with head dims 192/128 and page size 1, the scheduler sorting 40
# requests, and an AttentionPlan of capacity 8 running a batch of 6 (3 real requests, 3 zero-length).
# Also a split causal prefill with more tiles than CTAs (the Hopper kernel's tile slots reused).
# And ALiBi with sinks on the head-dim-64 Hopper kernel of three consumer warpgroups, and two causal user
# variants at head dims 64 and 128 (ALiBi on kg_abs plus a per-key tensor read by kv_idx; the
# distance's float copy used non-linearly and as an index).  And a bf16 q quantised on the device
# (quantize_q=True) for the d 128 FP8 tensor-core kernel, which reads its factors past q.  And 768 tiles on
# 132 CTAs on the FP8-cache kernels (a bf16 q and an e4m3 q): the tile slots lapped (the TileInfo slots too
# with heuristics.SM90_FP8_TILEINFO).
# Zero-length requests and rows past the last request are in most of them.
#
# Usage: OUT=/tmp/out bash tools/sanitize.sh        (logs and sanitize.json go to $OUT, default ./gpu_out)
# Env:   SANITIZE_TOOLS ("memcheck racecheck"), SANITIZE_LIMIT (seconds per tool, 210),
#        SANITIZE_API_ERRORS (--report-api-errors value, "no"), SANITIZE_EXTRA (extra
#        compute-sanitizer options, e.g. "--kernel-name kns=kg_"), PYTHON (python3).
# Prints "memcheck errors: N" and "racecheck errors: N"; exits 0 only if every count is 0 and the
# subset's own results match the reference.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-${1:-$PWD/gpu_out}}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export KERNELGEN_CACHE_DIR="${KERNELGEN_CACHE_DIR:-$PWD/cache}"
PY="${PYTHON:-python3}"
TOOLS="${SANITIZE_TOOLS:-memcheck racecheck}"
LIMIT="${SANITIZE_LIMIT:-210}"

SAN="$(command -v compute-sanitizer || true)"
if [ -z "$SAN" ]; then
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
           /usr/local/cuda-*/bin/compute-sanitizer /usr/local/cuda-*/compute-sanitizer/compute-sanitizer; do
    if [ -x "$c" ]; then SAN="$c"; break; fi
  done
fi
if [ -z "$SAN" ]; then
  SAN="$(find /opt/nvidia /usr/local -maxdepth 6 -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -n 1)"
fi
if [ -z "$SAN" ]; then
  echo "sanitize: compute-sanitizer not found (PATH, /usr/local/cuda*, /opt/nvidia)"
  for t in $TOOLS; do echo "$t errors: unknown"; done
  exit 2
fi
echo "sanitize: $SAN ($("$SAN" --version 2>/dev/null | tail -n 1))"
# Errors returned to the host by CUDA API calls (PyTorch and CuPy probe a few on purpose) are not
# kernel memory errors; leave them out of the count unless SANITIZE_API_ERRORS says otherwise.
API_OPT=""
if "$SAN" --help 2>/dev/null | grep -q -- '--report-api-errors'; then
  API_OPT="--report-api-errors ${SANITIZE_API_ERRORS:-no}"
fi

# 1. Without a sanitizer: compiles (or loads) the kernels and checks the subset against the reference.
start=$(date +%s)
timeout 150 "$PY" tools/fuzz.py --sanitize-subset --json "$OUT/sanitize_subset.json" > "$OUT/sanitize_plain.log" 2>&1
plain_rc=$?
tail -n 12 "$OUT/sanitize_plain.log"
echo "sanitize: plain run rc $plain_rc ($(( $(date +%s) - start )) s)"

# 2. Under each tool.  No PyTorch caching allocator: every tensor is its own cudaMalloc, so an
#    access past a tensor's end is outside any allocation (inside a cached segment memcheck would
#    not see it).
status=0
json="{\"plain_rc\": $plain_rc"
for t in $TOOLS; do
  log="$OUT/sanitize_$t.log"
  start=$(date +%s)
  # shellcheck disable=SC2086
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "$LIMIT" "$SAN" --tool "$t" --error-exitcode 1 --print-limit 20 \
    $API_OPT ${SANITIZE_EXTRA:-} "$PY" tools/fuzz.py --sanitize-subset > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  # memcheck ends with "ERROR SUMMARY: N errors"; racecheck with "RACECHECK SUMMARY: H hazards
  # displayed (N errors, W warnings)"
  n="$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -n 1 | grep -oE '[0-9]+')"
  [ -n "$n" ] || n="$(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazards displayed \([0-9]+ error' "$log" | tail -n 1 \
                       | grep -oE '[0-9]+ error' | grep -oE '[0-9]+')"
  cases_ok="$(grep -c ': ok$' "$log")"
  if [ -z "$n" ]; then
    echo "sanitize: $t produced no ERROR SUMMARY (rc $rc after $secs s; timeout is rc 124); last lines:"
    tail -n 15 "$log"
    n="unknown"
    status=1
  elif [ "$n" != "0" ]; then
    echo "sanitize: $t reports $n errors; first reports:"
    grep -m 40 -E '^========= ' "$log" | head -n 40
    status=1
  fi
  if [ "$t" = racecheck ]; then
    grep -E 'RACECHECK SUMMARY' "$log" | tail -n 1
  fi
  if ! grep -q 'sanitize-subset: .* cases ok' "$log" || grep -q 'FAIL' "$log"; then
    echo "sanitize: the subset did not finish cleanly under $t (rc $rc); see $log"
    status=1
  fi
  echo "sanitize: $t rc $rc, $cases_ok cases ok, $secs s"
  echo "$t errors: $n"
  if [ "$n" = unknown ]; then jn=null; else jn=$n; fi
  json="$json, \"${t}_errors\": $jn, \"${t}_rc\": $rc, \"${t}_seconds\": $secs"
done
[ "$plain_rc" = 0 ] || status=1
echo "$json, \"ok\": $([ $status = 0 ] && echo true || echo false)}" > "$OUT/sanitize.json"
echo "sanitize: $([ $status = 0 ] && echo ok || echo FAILED) (details in $OUT/sanitize_*.log)"
exit $status
