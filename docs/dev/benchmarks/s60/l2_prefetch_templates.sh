#!/usr/bin/env bash
# (Ran in calls 4 / 5 at the commits their scripts name; with today's templates it no longer applies: l2_variants.sh does.)
# Writes DEST/ef0: the checkout's templates with the evict_first copies' L2 prefetch size (common/ptx.cuh
# KG_EF_PREFETCH, the one-warp paged decode tiles' K / V / Q copies) back to none, as before the sixtieth
# session, for decode_ab.py (which swaps template folders; KERNELGEN_DEFINES would apply to both sides).
set -eu
D=${1:?destination folder}
rm -rf $D/ef0; mkdir -p $D; cp -r templates $D/ef0
sed -i "s/^#define KG_EF_PREFETCH 128$/#define KG_EF_PREFETCH 0/" $D/ef0/common/ptx.cuh
grep -q "^#define KG_EF_PREFETCH 0$" $D/ef0/common/ptx.cuh
