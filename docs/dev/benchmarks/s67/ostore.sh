#!/usr/bin/env bash
# Sixty-seventh session's experiment for the next lease, any Hopper GPU, after a call that stashed the
# peers' part 1 (s67/one.sh), carry [".peers/manifest.json", ".peers/part2", ".devcache_bench"]:
# wide O stores (docs/dev/experiments/o-store-wide.patch, KG_O_STORE = 4 / 8 / 16 bytes a thread a
# store; 4 is today's store pattern on the patch's code, the control) against the dispatched kernels, FA3
# beside, interleaved graph replays, 3 passes.  The ncu read (docs/dev/fp8_ncu_h100_s67.md) puts 10.6 %
# of FA3's consumer time in kernelgen's FP8 d 256 O stores (lg throttle, every sector written in two
# halves) against FA3's 5.75: predicted -4 % (3-5 %) at d 256, about 0 at d 64.  L s in all (default 350),
# each A/B at most 70 s (the last two 60; about 5 configurations x 3 passes).
set -u
W=$OUT/w; mkdir -p $W
L=${L:-350}
export PYTHONPATH=$PWD KERNELGEN_CACHE_DIR=$PWD/cache
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $W/gpu.txt
timeout 20 python3 tools/device_cache.py unpack --dir .devcache_bench > $W/devcache.log 2>&1
timeout 60 python3 tools/peer_wheels.py install --dir .peers > $W/peers.log 2>&1; echo "peers rc $? at $SECONDS" >> $W/rc.txt
export PYTHONPATH="$PYTHONPATH:$(tail -n 1 $W/peers.log)"
LT=/tmp/ostore; rm -rf $LT; mkdir -p $LT; cp -r templates $LT/
( cd $LT && patch -p1 < $OLDPWD/docs/dev/experiments/o-store-wide.patch ) > $W/patch.log 2>&1; echo "patch rc $? at $SECONDS" >> $W/rc.txt
left() { echo $(( L - 5 - SECONDS )); }
ab() {  # name, shape, tile prefix (path:d:bm:bn:stages:opts), peer (and extra configurations), extra args, cap (s)
  local T=$3 cap=${6:-70} t
  t=$(left); [ $t -gt $cap ] && t=$cap
  [ $t -gt 30 ] || { echo "$1 skipped at $SECONDS" >> $W/rc.txt; return; }
  timeout $t python3 benchmarks/experiments/tile_ab.py --passes 3 --shapes $2 ${5:-} \
    --configs base=$T,o4=$T:KG_O_STORE=4:$LT/templates,o8=$T:KG_O_STORE=8:$LT/templates,o16=$T:KG_O_STORE=16:$LT/templates,$4 \
    > $W/$1.log 2>&1; echo "$1 rc $? at $SECONDS" >> $W/rc.txt
}
# (FP8 d 256 also: the ncu read's first proposal, the P V wait pinned after the row max, KG_PIN_FP8=1)
ab fp8_h256 h256=2:4096:16:16:256:1 fp8q:256:128:128:2:p pin1=fp8q:256:128:128:2:p:KG_PIN_FP8=1,fa3=fa3fp8
ab bf16_h256 h256=2:4096:16:16:256:1 bf16:256:128:80:2:p fa3=fa3
ab bf16_h128 c16k=1:16384:32:8:128:1 bf16:128:128:128:2:pt fa3=fa3
ab fp8_gemma2 gemma2=1:16384:16:8:256:1 fp8q:256:128:128:2:p fa3=fa3fp8 "--softcap 50" 60
ab fp8_d64 gptoss=1:16384:64:8:64:1 fp8q:64:192:128:2:p fa3=fa3fp8 "" 60
cat $W/gpu.txt $W/rc.txt
for n in fp8_h256 bf16_h256 bf16_h128 fp8_gemma2 fp8_d64; do [ -f $W/$n.log ] && echo "$n: $(tail -1 $W/$n.log)"; done
cd $OUT && tar -czf w.tgz w
