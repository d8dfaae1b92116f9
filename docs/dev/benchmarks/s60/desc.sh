#!/usr/bin/env bash
# Sixtieth session, for any Hopper GPU (no carry; about 60 s): desc.py with this tree's templates, then in
# a process of its own with the L2 hint back on the paged FP8 tiles without a mask or splits (their
# hinted copies get desc[UR1] from NVRTC 13.0's ptxas): does that fault?
set -u
export PYTHONPATH=$PWD
rm -rf /tmp/tpl_desc && cp -r templates /tmp/tpl_desc
sed -i 's/^    \&\& !({{ "true" if v.get("kv_dtype") else "false" }} \&\& !CAUSAL \&\& !LOCAL \&\& !SPLIT);$/    ;/' \
  /tmp/tpl_desc/attention/variant_sm80.cuh
grep -q "!CAUSAL && !LOCAL && !SPLIT" /tmp/tpl_desc/attention/variant_sm80.cuh && { echo "sed failed"; exit 1; }
timeout 120 python3 docs/dev/benchmarks/s60/desc.py; echo "unhinted rc $?"
timeout 120 python3 docs/dev/benchmarks/s60/desc.py /tmp/tpl_desc; echo "hinted rc $?"
