#!/usr/bin/env bash
# Sixty-eighth session, after a call that stashed the peers' part 1 (carry [".peers/manifest.json", ".peers/part2"]):
# the merged O store width (the dispatched kernels: 16-byte stores, 4 where they spilled) against
# KG_O_STORE=4 (the old store pattern) on the same templates, FA3 beside, interleaved graph replays,
# 3 passes, caps 60 s: FP8 d 256, bf16 d 256 causal (16-byte stores since its consumers read the tile
# index through the shared window), bf16 d 128
# causal 16k, gemma2's FP8 d 256 soft-cap, gpt-oss FP8 d 64, bf16 d 128 (4 x 4k) and d 256 (2 x 4k) non-causal.
set -u
W=$OUT/w; mkdir -p $W
L=${L:-400}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
left() { echo $(( L - 5 - SECONDS )); }
ab() {  # name, shape, tile prefix, peer, extra args, cap
  local T=$3 cap=${6:-60} t
  t=$(left); [ $t -gt $cap ] && t=$cap
  [ $t -gt 30 ] || { echo "$1 skipped at $SECONDS" >> $W/rc.txt; return; }
  timeout $t python3 benchmarks/experiments/tile_ab.py --passes 3 --shapes $2 ${5:-} \
    --configs base=$T,o4=$T:KG_O_STORE=4,$4 > $W/$1.log 2>&1; echo "$1 rc $? at $SECONDS" >> $W/rc.txt
}
ab fp8_h256 h256=2:4096:16:16:256:1 fp8q:256:128:128:2:p fa3=fa3fp8
ab bf16_h256 h256=2:4096:16:16:256:1 bf16:256:128:80:2:p fa3=fa3
ab bf16_h128 c16k=1:16384:32:8:128:1 bf16:128:128:128:2:pt fa3=fa3
ab fp8_gemma2 gemma2=1:16384:16:8:256:1 fp8q:256:128:128:2:p fa3=fa3fp8 "--softcap 50"
ab fp8_d64 gptoss=1:16384:64:8:64:1 fp8q:64:192:128:2:p fa3=fa3fp8
ab bf16_nc128 nc128=4:4096:32:8:128:0 bf16:128:128:128:2:pt fa3=fa3
ab bf16_h256nc h256nc=2:4096:16:16:256:0 bf16:256:128:80:2:p fa3=fa3
cat $W/gpu.txt $W/rc.txt
for n in fp8_h256 bf16_h256 bf16_h128 fp8_gemma2 fp8_d64 bf16_nc128 bf16_h256nc; do [ -f $W/$n.log ] && echo "$n: $(tail -1 $W/$n.log)"; done
cd $OUT && tar -czf w.tgz w
