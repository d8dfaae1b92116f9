"""Counted model of pack-GQA on the Hopper prefill kernel for one causal request (CPU, no GPU).

The persistent scheduler hands tiles out longest first (causal: every head's last m-block first,
``kernelgen.kernels.metadata.decode_local_tile``); each CTA takes the next tile when it is free.
A tile costs its key blocks (``--mask-cost`` for a block on the causal diagonal, 1 for an
unmasked one) plus ``--tile-cost`` blocks of fixed work.  Unpacked tiles are ``--block-m`` tokens
of one query head; packed ones are ``block_m / qpk`` tokens of the ``qpk`` query heads of a KV head.
Prints, per length, the key blocks packed / unpacked, the masked blocks, and the makespans'
ratio: what packing would gain if a block cost the same packed and unpacked (the plain kernel's
measured packed / unpacked follows it; perf log, "Fifty-first session").

    python benchmarks/experiments/pack_tile_model.py --heads 64/8 --block-m 192 --lengths 4096,8192,16384
"""
import argparse
import heapq
import math


def tiles(seqlen: int, tokens: int, heads: int, block_n: int, mask_cost: float, tile_cost: float) -> list:
    """(cost, unmasked blocks, masked blocks) of every tile, in the scheduler's order."""
    m = math.ceil(seqlen / tokens)
    out = []
    for x in range(m):
        mb = m - 1 - x
        t0, t1 = mb * tokens, min(seqlen, (mb + 1) * tokens)
        n = math.ceil(t1 / block_n)
        masked = n - t0 // block_n
        out += [(n - masked + mask_cost * masked + tile_cost, n - masked, masked)] * heads
    return out


def makespan(ts: list, ctas: int) -> float:
    heap = [0.0] * ctas
    for cost, _, _ in ts:
        heapq.heappush(heap, heapq.heappop(heap) + cost)
    return max(heap)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", default="64/8", help="HQ/HKV")
    ap.add_argument("--block-m", type=int, default=192)
    ap.add_argument("--block-n", type=int, default=128)
    ap.add_argument("--lengths", default="2048,4096,8192,16384")
    ap.add_argument("--ctas", type=int, default=132, help="persistent CTAs (one an SM)")
    ap.add_argument("--mask-cost", type=float, default=1.3)
    ap.add_argument("--tile-cost", type=float, default=2.0)
    a = ap.parse_args()
    hq, hkv = (int(x) for x in a.heads.split("/"))
    qpk = hq // hkv
    if a.block_m % qpk:
        raise SystemExit(f"--block-m {a.block_m} is not a multiple of {qpk} query heads a KV head")
    for s in (int(x) for x in a.lengths.split(",")):
        u = tiles(s, a.block_m, hq, a.block_n, a.mask_cost, a.tile_cost)
        p = tiles(s, a.block_m // qpk, hkv, a.block_n, a.mask_cost, a.tile_cost)
        blocks = [sum(nu + nm for _, nu, nm in t) for t in (u, p)]
        masked = [sum(nm for *_, nm in t) for t in (u, p)]
        print(f"{s:6d} tokens: key blocks packed / unpacked {blocks[1] / blocks[0]:.4f}, masked {masked[0]} -> "
              f"{masked[1]}, makespan packed / unpacked {makespan(p, a.ctas) / makespan(u, a.ctas):.4f}")


if __name__ == "__main__":
    main()
