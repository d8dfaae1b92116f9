#!/usr/bin/env bash
# Writes DEST/p256 and DEST/p128: the checkout's templates with the evict_first copy (common/ptx.cuh
# cp_async16_ef, the one-warp paged decode tiles' K/V / Q copies) given an L2 prefetch size.
set -eu
D=${1:?destination folder}
for P in 256 128; do
  rm -rf $D/p$P; mkdir -p $D; cp -r templates $D/p$P
  sed -i "s/cp.async.cg.shared.global.L2::cache_hint \[/cp.async.cg.shared.global.L2::cache_hint.L2::${P}B [/" $D/p$P/common/ptx.cuh
  grep -q "L2::${P}B" $D/p$P/common/ptx.cuh
done
