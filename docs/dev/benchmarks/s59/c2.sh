#!/usr/bin/env bash
# Fifty-ninth session, a device try (carry [".peers/manifest.json", ".peers/part1"]).  On an H200: stash the
# peers' part 1 (rc 3 expected) for s58/c2.sh.  Else: `plan_device.py` (AttentionPlan's device forms on the GPU,
# the session's plan._device_index; compiles one kernel set, about 30 s).
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  timeout 60 python3 tools/peer_wheels.py install --dir .peers; echo "p1 rc $?"; exit 0
fi
PYTHONPATH=$PWD timeout 120 python3 docs/dev/benchmarks/s59/plan_device.py
