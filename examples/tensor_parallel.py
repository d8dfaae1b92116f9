"""Tensor-parallel attention with kernelgen: attention heads split across GPUs.

One process per GPU (``torch.multiprocessing.spawn``, world size = number of GPUs), NCCL through
``torch.distributed``.  Rank r owns KV heads ``[r*Hkv/W, (r+1)*Hkv/W)`` and the query heads that
use them (GQA groups stay whole), runs ``kernelgen.varlen_attention`` on its own GPU, and an
``all_gather`` rebuilds the full (tokens, Hq, d) output.  Rank 0 compares it with the same call on
one GPU over all heads, and both with the float64 reference.

Two batches: a causal prefill on packed K/V (ragged lengths, one request without query rows) and
a paged decode with split-KV (pages in random order, an empty context).

    python examples/tensor_parallel.py            # prints "tensor_parallel: ok max_err=..."

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), set here before the process group starts.
"""
from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

HQ, HKV, D = 32, 8, 128          # 8 KV heads: splits evenly over 1, 2, 4 or 8 GPUs
DTYPE = torch.bfloat16
SEED = 1234


def make_batches(seed: int = SEED) -> list:
    """Host tensors of the two batches (the same on every rank: a seeded CPU generator)."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    qlens, klens = [900, 0, 257, 31, 1], [900, 7, 600, 31, 2000]
    prefill = {
        "name": "prefill_causal_packed",
        "q": torch.randn(sum(qlens), HQ, D, generator=g).to(DTYPE),
        "k": torch.randn(sum(klens), HKV, D, generator=g).to(DTYPE),
        "v": torch.randn(sum(klens), HKV, D, generator=g).to(DTYPE),
        "cu_q": torch.tensor(np.concatenate([[0], np.cumsum(qlens)]), dtype=torch.int32),
        "cu_k": torch.tensor(np.concatenate([[0], np.cumsum(klens)]), dtype=torch.int32),
        "maxq": max(qlens), "maxk": max(klens),
    }
    ps, used = 16, [4000, 0, 17, 2500, 64, 1]
    need = [-(-n // ps) for n in used]
    num_pages = sum(need) + 3
    perm = rng.permutation(num_pages)
    pt = np.full((len(used), max(need) + 1), -1, dtype=np.int32)
    at = 0
    for b, n in enumerate(need):
        pt[b, :n] = perm[at:at + n]
        at += n
    decode = {
        "name": "decode_paged_split",
        "q": torch.randn(len(used), HQ, D, generator=g).to(DTYPE),
        "k": torch.randn(num_pages, ps, HKV, D, generator=g).to(DTYPE),
        "v": torch.randn(num_pages, ps, HKV, D, generator=g).to(DTYPE),
        "cu_q": torch.arange(len(used) + 1, dtype=torch.int32),
        "page_table": torch.tensor(pt), "seqused_k": torch.tensor(used, dtype=torch.int32),
        "maxq": 1, "maxk": max(used), "num_splits": 4,
    }
    return [prefill, decode]


def attention(batch: dict, q, k, v, device):
    """kernelgen on ``device`` for these (possibly head-sliced) q, k, v; returns (out, lse)."""
    import kernelgen

    put = lambda t: None if t is None else t.to(device)  # noqa: E731
    paged = "page_table" in batch
    return kernelgen.varlen_attention(
        q.to(device), k.to(device), v.to(device), put(batch["cu_q"]), None if paged else put(batch["cu_k"]),
        batch["maxq"], batch["maxk"], seqused_k=put(batch.get("seqused_k")), page_table=put(batch.get("page_table")),
        causal=True, num_splits=batch.get("num_splits", 0), return_lse=True)


def shard(batch: dict, rank: int, world: int):
    """This rank's heads: q heads of its KV heads (head dim 1 of q, dim -2 of k/v), contiguous."""
    kv0, kv1 = rank * HKV // world, (rank + 1) * HKV // world
    qpk = HQ // HKV
    q = batch["q"][:, kv0 * qpk:kv1 * qpk].contiguous()
    k = batch["k"][..., kv0:kv1, :].contiguous()
    v = batch["v"][..., kv0:kv1, :].contiguous()
    return q, k, v


def reference(batch: dict, device):
    from kernelgen.apps.reference import attention_reference, gather_paged

    q = batch["q"].to(device)
    if "page_table" in batch:
        k, v, cu_k = gather_paged(batch["k"].to(device), batch["v"].to(device), batch["page_table"].to(device),
                                  batch["seqused_k"].to(device))
    else:
        k, v, cu_k = batch["k"].to(device), batch["v"].to(device), batch["cu_k"].to(device)
    return attention_reference(q, k, v, batch["cu_q"].to(device), cu_k, causal=True)


def within_tolerance(out, ref) -> bool:
    from kernelgen.apps.reference import tolerance

    atol, rtol = tolerance(DTYPE)
    r = ref.to(DTYPE).double()
    return bool((~torch.isnan(out)).all()) and bool(((out.double() - r).abs() <= atol + rtol * r.abs()).all())


def worker(rank: int, world: int, port: int) -> None:
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ[k] = v
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=180))
    lines, ok, max_err, bitwise = [], True, 0.0, True
    try:
        for batch in make_batches():
            q, k, v = shard(batch, rank, world)
            out, lse = attention(batch, q, k, v, device)
            outs = [torch.empty_like(out) for _ in range(world)]
            lses = [torch.empty_like(lse) for _ in range(world)]
            dist.all_gather(outs, out)
            dist.all_gather(lses, lse)
            if rank != 0:
                continue
            tp_out, tp_lse = torch.cat(outs, dim=1), torch.cat(lses, dim=0)
            one_out, one_lse = attention(batch, batch["q"], batch["k"], batch["v"], device)
            torch.cuda.synchronize(device)
            ref, ref_lse = reference(batch, device)
            err = float((tp_out.double() - one_out.double()).abs().max().item())
            same = torch.equal(tp_out, one_out) and torch.equal(tp_lse, one_lse)
            fin = torch.isfinite(ref_lse)
            lse_ok = torch.equal(torch.isneginf(tp_lse), torch.isneginf(ref_lse)) and bool(
                ((tp_lse.double()[fin] - ref_lse[fin]).abs() <= 2e-3 + 1e-4 * ref_lse[fin].abs()).all())
            case_ok = within_tolerance(tp_out, ref) and within_tolerance(one_out, ref) and lse_ok
            ok &= case_ok
            bitwise &= same
            max_err = max(max_err, err)
            lines.append(f"tensor_parallel: {batch['name']}: world {world}, |tp - one gpu| max {err:.3e}, "
                         f"bitwise equal {same}, reference {'ok' if case_ok else 'MISMATCH'}")
    except Exception as e:  # noqa: BLE001 - reported by rank 0 after the group is torn down
        ok = False
        lines.append(f"tensor_parallel: rank {rank} failed: {type(e).__name__}: {e}")
    finally:
        try:
            dist.barrier()
        finally:
            dist.destroy_process_group()
    if rank == 0:
        print("\n".join(lines))
        status = "ok" if ok else "FAIL"
        print(f"tensor_parallel: {status} max_err={max_err:.3e} world_size={world} bitwise_equal={bitwise}", flush=True)
    if not ok:
        sys.exit(1)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    if not torch.cuda.is_available():
        print("tensor_parallel: needs CUDA GPUs")
        return 2
    world = torch.cuda.device_count()
    while HKV % world:                 # heads must split evenly; use the largest divisor of HKV
        world -= 1
    mp.spawn(worker, args=(world, free_port()), nprocs=world, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
