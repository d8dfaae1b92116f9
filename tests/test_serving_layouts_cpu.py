"""The KV-cache layouts of vLLM and SGLang are kernelgen paged caches as they are: views of the
engine's cache tensor pass varlen_attention's validation and the plan's checks with no copy, and
TMA can address them (``tma_compatible``: what the Hopper path and a Hopper plan's step check,
``selection.arguments.plan_inputs``, require).  docs/serving.md, "vLLM and SGLang caches"."""
import pytest
import torch

from kernelgen.kernels import tma
from kernelgen.selection import validation as V

NB, BS, HKV, HQ, D = 64, 16, 8, 32, 128
META = ("cuda", "meta")


def M(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def layouts():
    """name -> (cache tensor the engine owns, k view, v view)."""
    out = {}
    c = M(2, NB, BS, HKV, D)                     # vLLM FlashAttention backend: [2, num_blocks, block_size, Hkv, D]
    out["vllm_flash"] = (c, c[0], c[1])
    c = M(NB, 2, BS, HKV, D)                     # [num_blocks, 2, block_size, Hkv, D] (FlashInfer NHD)
    out["vllm_nhd_blocks_first"] = (c, c[:, 0], c[:, 1])
    c = M(NB, 2, HKV, BS, D)                     # [num_blocks, 2, Hkv, block_size, D] (HND), heads outside tokens
    out["vllm_hnd"] = (c, c[:, 0].transpose(1, 2), c[:, 1].transpose(1, 2))
    k, v = M(NB * BS, HKV, D), M(NB * BS, HKV, D)   # SGLang token pool: one (size, Hkv, D) buffer per layer
    out["sglang_token_pool"] = (k, k.unsqueeze(1), v.unsqueeze(1))
    return out


@pytest.mark.parametrize("name", sorted(layouts()))
def test_engine_cache_views_are_valid_paged_caches_without_copies(name):
    cache, k, v = layouts()[name]
    assert k._base is cache and v._base is (cache if name != "sglang_token_pool" else v._base)   # views
    assert k.shape[2:] == (HKV, D)
    batch, max_pages = 3, 8
    page_size = k.shape[1]
    q = M(5, HQ, D)
    cu_q = M(batch + 1, dtype=torch.int32)               # from vLLM's query_start_loc
    seqused_k = M(batch, dtype=torch.int32)              # vLLM's seq_lens
    page_table = M(batch, max_pages * (BS // page_size), dtype=torch.int32)   # block_tables (SGLang: req_to_token)
    sizes = V.varlen_inputs(q, k, v, cu_q, None, 2, 100, None, devtypes=META, seqused_k=seqused_k,
                            page_table=page_table)
    assert sizes["paged"] and sizes["num_pages"] == k.shape[0] and sizes["page_size"] == page_size
    assert tma.tma_compatible(k) and tma.tma_compatible(v)


def test_views_share_the_engine_storage():
    """On real (CPU) storage: writing through the cache is seen through the views (no copy was made)."""
    c = torch.zeros(2, 4, BS, 2, 64, dtype=torch.bfloat16)
    k, v = c[0], c[1]
    c[0, 3, 5, 1, 7] = 1.5
    c[1, 2, 0, 0, 0] = -2.0
    assert k[3, 5, 1, 7] == 1.5 and v[2, 0, 0, 0] == -2.0
    assert k.data_ptr() == c.data_ptr() and v.data_ptr() == c.data_ptr() + c[0].numel() * c.element_size()
    hnd = torch.zeros(4, 2, 2, BS, 64, dtype=torch.bfloat16)[:, 0].transpose(1, 2)
    V.rows_16b("k", hnd)                                   # strides in 16-byte multiples: accepted as is

