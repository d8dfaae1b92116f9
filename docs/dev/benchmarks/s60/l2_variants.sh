#!/usr/bin/env bash
# Writes template folders for decode_ab.py under DEST (the checkout's templates, one line changed):
#   ef0 / ef256: the evict_first copies with no / a 256-byte L2 prefetch (variant_sm80.cuh KV_EF_PREFETCH);
#   n0 / n128 / n256: the decode tiles without the evict_first hint (KV_EVICT_FIRST false), their plain
#   copies with no / 128 / 256 bytes of L2 prefetch (common/ptx.cuh KG_CP_PREFETCH).
set -eu
D=${1:?destination folder}
mk() { rm -rf $D/$1; mkdir -p $D; cp -r templates $D/$1; }
for P in 0 256; do
  mk ef$P
  sed -i "s/^constexpr int KV_EF_PREFETCH = (D < DV.*$/constexpr int KV_EF_PREFETCH = $P;/" $D/ef$P/attention/variant_sm80.cuh
  grep -q "^constexpr int KV_EF_PREFETCH = $P;$" $D/ef$P/attention/variant_sm80.cuh
done
for P in 0 128 256; do
  mk n$P
  sed -i "s/^constexpr bool KV_EVICT_FIRST = .*$/constexpr bool KV_EVICT_FIRST = false;/" $D/n$P/attention/variant_sm80.cuh
  sed -i "s/^#define KG_CP_PREFETCH 0$/#define KG_CP_PREFETCH $P/" $D/n$P/common/ptx.cuh
  grep -q "^constexpr bool KV_EVICT_FIRST = false;$" $D/n$P/attention/variant_sm80.cuh
  grep -q "^#define KG_CP_PREFETCH $P$" $D/n$P/common/ptx.cuh
done
