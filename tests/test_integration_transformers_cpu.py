"""kernelgen.integrations.transformers on the CPU: registration, the mapping of transformers'
attention arguments onto ``varlen_attention`` (captured with a stand-in that computes attention in
float32 with torch), the errors, and one tiny random-weight forward per model family (Llama,
Qwen2, Mistral, Gemma-2, gpt-oss) equal to transformers' own sdpa (eager for gpt-oss) attention.
No downloads.  The GPU runs of the same families are tests/gpu/test_transformers_gpu.py."""
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

import kernelgen.integrations.transformers as kh  # noqa: E402  (registers "kernelgen")

BF16 = torch.bfloat16


def reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None, *,
                     seqused_k=None, causal=False, window_size=(-1, -1), softcap=0.0, softmax_scale=None, sinks=None,
                     **_):
    """varlen_attention's contract (docs/api.md) in float32 torch: bottom-right causal, window
    around the diagonal, soft-cap, gpt-oss sinks (an extra logit per head with no value)."""
    hq, d = q.shape[1], q.shape[2]
    hkv = k.shape[1]
    scale = softmax_scale if softmax_scale is not None else d ** -0.5
    out = torch.zeros(q.shape[0], hq, v.shape[-1], dtype=q.dtype)
    for i in range(len(cu_seqlens_q) - 1):
        q0, q1 = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        k0, k1 = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
        if seqused_k is not None:
            k1 = k0 + int(seqused_k[i])
        lq, lk = q1 - q0, k1 - k0
        if lq == 0:
            continue
        qi = q[q0:q1].float().transpose(0, 1)                                  # (H, Lq, D)
        ki = k[k0:k1].float().transpose(0, 1).repeat_interleave(hq // hkv, 0)  # (H, Lk, D)
        vi = v[k0:k1].float().transpose(0, 1).repeat_interleave(hq // hkv, 0)
        s = qi @ ki.transpose(1, 2) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        diag = torch.arange(lq)[:, None] + lk - lq
        j = torch.arange(lk)[None, :]
        ok = torch.ones(lq, lk, dtype=torch.bool)
        left, right = window_size
        if causal:
            right = 0
        if right >= 0:
            ok &= j <= diag + right
        if left >= 0:
            ok &= j >= diag - left
        s = s.masked_fill(~ok, float("-inf"))
        if sinks is not None:
            s = torch.cat([s, sinks.float().view(hq, 1, 1).expand(hq, lq, 1)], dim=-1)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)[..., :lk]
        out[q0:q1] = (p @ vi).transpose(0, 1).to(q.dtype)
    return out


@pytest.fixture
def calls(monkeypatch):
    """Replace kernelgen's kernel call by the float32 reference; the list records each call."""
    seen = []

    def fake(*args, **kw):   # copies: continuous batching reuses its index tensors from step to step
        seen.append((tuple(a.clone() if torch.is_tensor(a) else a for a in args),
                     {n: a.clone() if torch.is_tensor(a) else a for n, a in kw.items()}))
        return reference_varlen(*args, **kw)

    monkeypatch.setattr(kh, "varlen_attention", fake)
    return seen


class Module(torch.nn.Module):
    def __init__(self, is_causal=True, layer=0):
        super().__init__()
        self.is_causal, self.layer_idx = is_causal, layer


def qkv(b=2, hq=4, hkv=2, sq=5, sk=5, d=64, dtype=BF16):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(b, hq, sq, d, generator=g).to(dtype), torch.randn(b, hkv, sk, d, generator=g).to(dtype),
            torch.randn(b, hkv, sk, d, generator=g).to(dtype))


# --- registration -------------------------------------------------------------------------------

def test_registration_is_idempotent_and_registers_attention_and_mask():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    kh.register()
    kh.register()
    assert AttentionInterface()["kernelgen"] is kh.kernelgen_attention_forward
    assert AttentionInterface()["paged|kernelgen"] is kh.kernelgen_paged_attention_forward
    assert AttentionMaskInterface()["kernelgen"] is flash_attention_mask


def test_importing_kernelgen_does_not_import_transformers():
    import subprocess

    code = "import sys, kernelgen, kernelgen.integrations; print('transformers' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"


# --- argument mapping ---------------------------------------------------------------------------

def test_no_padding_maps_to_uniform_cu_seqlens_gqa_and_scale(calls):
    q, k, v = qkv(b=2, sq=5, sk=5)
    out, w = kh.kernelgen_attention_forward(Module(), q, k, v, None, scaling=0.3)
    assert w is None and out.shape == (2, 5, 4, 64)
    (args, kw), = calls
    qp, kp, vp, cu_q, cu_k, mq, mk = args
    assert qp.shape == (10, 4, 64) and kp.shape == (10, 2, 64) and vp.shape == (10, 2, 64)
    assert cu_q.dtype == torch.int32 and cu_q.tolist() == [0, 5, 10] and cu_k.tolist() == [0, 5, 10]
    assert (mq, mk) == (5, 5)
    assert kw == dict(causal=True, window_size=(-1, -1), softcap=0.0, softmax_scale=0.3)
    torch.testing.assert_close(qp[5:10], q[1].transpose(0, 1))


def test_left_padding_mask_becomes_varlen_without_gathers(calls):
    """generate's left padding: every row stays, request b's keys start past its padding
    (cu_seqlens_k[b] = b * Sk + pad_b, seqused_k = its real keys), padded queries see nothing."""
    q, k, v = qkv(b=3, sq=6, sk=6)
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1]])
    out, _ = kh.kernelgen_attention_forward(Module(), q, k, v, mask)
    (args, kw), = calls
    qp, kp, _, cu_q, cu_k, mq, mk = args
    assert qp.shape == (18, 4, 64) and kp.shape == (18, 2, 64) and (mq, mk) == (6, 6)
    assert cu_q.tolist() == [0, 6, 12, 18] and cu_k.tolist() == [0, 8, 17, 18]
    assert kw["seqused_k"].tolist() == [6, 4, 1] and kw["seqused_k"].dtype == torch.int32
    torch.testing.assert_close(kp[8:12], k[1, :, 2:].transpose(0, 1))
    assert (out[1, :2] == 0).all() and (out[2, :5] == 0).all()     # padded query rows are zeros
    torch.testing.assert_close(out[2, 5], reference_varlen(q[2, :, 5:].transpose(0, 1), k[2, :, 5:].transpose(0, 1),
                                                           v[2, :, 5:].transpose(0, 1), [0, 1], [0, 1], causal=True)[0])


def test_the_mask_is_read_once_per_forward(calls, monkeypatch):
    """Every layer of a forward gets the same mask object: its layout is computed once (one host
    sync), and a changed mask (a new object, or the same one written in place) is read again."""
    q, k, v = qkv(b=2, sq=1, sk=5)
    mask = torch.tensor([[1] * 5, [0, 1, 1, 1, 1]])
    seen = []
    real = kh._Layout
    monkeypatch.setattr(kh, "_Layout", lambda: seen.append(1) or real())
    for _ in range(3):
        kh.kernelgen_attention_forward(Module(), q, k, v, mask)
    assert len(seen) == 1
    mask[1, 1] = 0
    kh.kernelgen_attention_forward(Module(), q, k, v, mask)
    assert len(seen) == 2 and calls[-1][1]["seqused_k"].tolist() == [5, 3]
    with torch.inference_mode():   # inference tensors have no version counter: once per forward, by layer
        imask = mask.clone()
        for layer in range(3):
            kh.kernelgen_attention_forward(Module(layer=layer), q, k, v, imask)
        assert len(seen) == 3 and calls[-1][1]["seqused_k"].tolist() == [5, 3]
        imask[1, 1:3] = 1                              # rewritten in place between forwards (a review's find:
        kh.kernelgen_attention_forward(Module(layer=0), q, k, v, imask)   # the old layout came back)
        assert len(seen) == 4 and calls[-1][1]["seqused_k"].tolist() == [5, 4]
        kh.kernelgen_attention_forward(Module(layer=1), q, k, v, imask)
        assert len(seen) == 4
        nolayer = Module()
        del nolayer.layer_idx                          # no layer index: read every call
        for _ in range(2):
            kh.kernelgen_attention_forward(nolayer, q, k, v, imask)
        assert len(seen) == 6 and calls[-1][1]["seqused_k"].tolist() == [5, 4]


def test_right_padding_prefill(calls):
    q, k, v = qkv(b=2, sq=4, sk=4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    out, _ = kh.kernelgen_attention_forward(Module(), q, k, v, mask)
    (args, _kw), = calls
    assert args[3].tolist() == [0, 4, 6] and args[4].tolist() == [0, 4, 6]
    torch.testing.assert_close(args[1][4:6], k[1, :, :2].transpose(0, 1))
    assert (out[1, 2:] == 0).all()


def test_decode_step_with_cache_and_left_padding(calls):
    """One new token per row, keys = cache + new token; the mask covers all keys."""
    q, k, v = qkv(b=2, sq=1, sk=7)
    mask = torch.tensor([[1] * 7, [0, 0, 0, 1, 1, 1, 1]])
    out, _ = kh.kernelgen_attention_forward(Module(), q, k, v, mask, sliding_window=3)
    (args, kw), = calls
    qp, kp, _, cu_q, cu_k, mq, mk = args
    assert qp.shape == (2, 4, 64) and cu_q.tolist() == [0, 1, 2] and cu_k.tolist() == [0, 10, 14] and (mq, mk) == (1, 7)
    assert kw["seqused_k"].tolist() == [7, 4]
    assert kw["causal"] and kw["window_size"] == (2, 0)
    assert out.shape == (2, 1, 4, 64)


def test_static_cache_longer_than_mask_is_cut(calls):
    q, k, v = qkv(b=1, sq=1, sk=16)
    kh.kernelgen_attention_forward(Module(), q, k, v, torch.ones(1, 9, dtype=torch.bool))
    (args, kw), = calls
    assert args[1].shape[0] == 9 and args[4].tolist() == [0, 9] and kw["seqused_k"].tolist() == [9]


def test_window_softcap_sinks_mapping(calls):
    q, k, v = qkv()
    sinks = torch.randn(4).to(BF16)
    kh.kernelgen_attention_forward(Module(), q, k, v, None, sliding_window=4, softcap=50.0, s_aux=sinks, scaling=0.125)
    kh.kernelgen_attention_forward(Module(is_causal=False), q, k, v, None, sliding_window=4)
    kh.kernelgen_attention_forward(Module(), q, k, v, None, is_causal=False)
    (_, kw1), (_, kw2), (_, kw3) = calls
    assert kw1["window_size"] == (3, 0) and kw1["softcap"] == 50.0 and kw1["softmax_scale"] == 0.125
    assert kw1["sinks"].dtype == torch.float32 and torch.equal(kw1["sinks"], sinks.float())
    assert kw2["window_size"] == (3, 3) and not kw2["causal"] and "sinks" not in kw2
    assert not kw3["causal"]


def test_sinks_keep_one_float32_copy_per_tensor():
    """The sink kernels key a prepared call by the sinks' address: a layer's bf16 sinks map to one
    float32 buffer across steps, refreshed in every call (an in-place update, through ``.data``
    too, which the version counter does not see: a review's find, or a new ``.data``), a new one
    only for a new shape or dtype change of the sinks; float32 sinks pass as they are."""
    sinks, sinks32 = torch.randn(4).to(BF16), torch.randn(4)
    a, b, c = kh._extra(sinks)["sinks"], kh._extra(sinks)["sinks"], kh._extra(sinks32)["sinks"]
    assert a is b and a.dtype == torch.float32 and torch.equal(a, sinks.float()) and c is sinks32
    with torch.no_grad():
        sinks.add_(1.0)
    assert kh._extra(sinks)["sinks"] is a and torch.equal(a, sinks.float())
    p = torch.nn.Parameter(torch.randn(4).to(BF16))
    e = kh._extra(p)["sinks"]
    p.data.copy_(torch.full((4,), 3.0))           # not seen by p's version counter
    assert kh._extra(p)["sinks"] is e and torch.equal(e, torch.full((4,), 3.0))
    p.data = torch.full((4,), -2.0).to(BF16)      # a new tensor behind the same parameter
    assert kh._extra(p)["sinks"] is e and torch.equal(e, torch.full((4,), -2.0))
    p.data = torch.zeros(6).to(BF16)              # a new shape: a new buffer
    f = kh._extra(p)["sinks"]
    assert f is not e and f.shape == (6,) and torch.equal(f, torch.zeros(6))
    with torch.inference_mode():   # sinks made in inference mode (no version counter) raised a RuntimeError
        isinks = torch.randn(4).to(BF16)
        g = kh._extra(isinks)["sinks"]
        assert g is kh._extra(isinks)["sinks"] and torch.equal(g, isinks.float())


def test_window_convention_equals_transformers_sliding_mask(calls):
    """w = sliding_window: transformers' mask keeps kv_idx > q_idx - w (w keys with the diagonal)."""
    from transformers.masking_utils import and_masks, causal_mask_function, sliding_window_overlay

    w, n = 3, 8
    q, k, v = qkv(b=1, sq=n, sk=n, hq=2, hkv=2)
    out, _ = kh.kernelgen_attention_forward(Module(), q, k, v, None, sliding_window=w)
    fn = and_masks(causal_mask_function, sliding_window_overlay(w))
    t = torch.tensor
    dense = torch.tensor([[bool(fn(t(0), t(0), t(i), t(j))) for j in range(n)] for i in range(n)])
    assert dense.sum(1).tolist() == [1, 2, 3, 3, 3, 3, 3, 3]
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=dense)
    torch.testing.assert_close(out.float(), ref.transpose(1, 2), atol=1e-2, rtol=1e-2)


def test_packed_sequences_from_cu_seq_lens_and_position_ids(calls):
    q, k, v = qkv(b=1, sq=7, sk=7)
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    kh.kernelgen_attention_forward(Module(), q, k, v, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=4,
                                   max_length_k=4)
    kh.kernelgen_attention_forward(Module(), q, k, v, None, position_ids=torch.tensor([[0, 1, 2, 0, 1, 2, 3]]))
    kh.kernelgen_attention_forward(Module(), q, k, v, None, position_ids=torch.tensor([[5, 6, 7, 8, 9, 10, 11]]))
    (a1, _), (a2, _), (a3, _) = calls
    assert a1[3].tolist() == [0, 3, 7] and a1[5:] == (4, 4)
    assert a2[3].tolist() == [0, 3, 7] and a2[4].tolist() == [0, 3, 7] and a2[5:] == (4, 4)
    assert a3[3].tolist() == [0, 7]                                   # one increasing run: not packed


# --- errors -------------------------------------------------------------------------------------

def test_errors_name_the_problem(calls):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="4-D attention_mask"):
        kh.kernelgen_attention_forward(Module(), q, k, v, torch.zeros(2, 1, 5, 5))
    with pytest.raises(ValueError, match="float32"):
        kh.kernelgen_attention_forward(Module(), q.float(), k.float(), v.float(), None)
    q80, k80, v80 = qkv(d=80)
    with pytest.raises(ValueError, match="query head dim 80 / value head dim 80 is not supported"):
        kh.kernelgen_attention_forward(Module(), q80, k80, v80, None)
    with pytest.raises(NotImplementedError, match="dropout"):
        kh.kernelgen_attention_forward(Module(), q, k, v, None, dropout=0.1)
    with pytest.raises(NotImplementedError, match="no backward"):
        kh.kernelgen_attention_forward(Module(), q.requires_grad_(), k, v, None)
    with pytest.raises(ValueError, match="without a paged attention cache"):
        kh.kernelgen_paged_attention_forward(Module(), q, k, v, None)
    with pytest.raises(NotImplementedError, match="block-table"):
        kh.kernelgen_paged_attention_forward(Module(), q, k, v, None, cache=object(), block_table=torch.zeros(1))
    assert calls == []


# --- tiny models, one forward each --------------------------------------------------------------

def tiny_config(family):
    """Random-weight configs: 2 layers, hidden 256, 4 query / 2 KV heads of 64 (as in
    tests/gpu/test_transformers_gpu.py)."""
    common = dict(vocab_size=128, hidden_size=256, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64)
    if family == "llama":
        return transformers.LlamaConfig(**common)
    if family == "qwen2":
        return transformers.Qwen2Config(**common)
    if family == "mistral":
        return transformers.MistralConfig(sliding_window=8, **common)
    if family == "gemma2":   # layers alternate sliding (8) / full; logits soft-capped at 50 in attention
        return transformers.Gemma2Config(sliding_window=8, attn_logit_softcapping=50.0, query_pre_attn_scalar=64,
                                         **common)
    if family == "gpt_oss":  # sinks, alternating sliding window; bf16 MoE, 2 experts both used (no routing flips)
        return transformers.GptOssConfig(sliding_window=8, num_local_experts=2, num_experts_per_tok=2,
                                         max_position_embeddings=131072, **common)
    raise KeyError(family)


FAMILIES = ["llama", "qwen2", "mistral", "gemma2", "gpt_oss"]


def reference_implementation(family):
    """transformers' own attention to compare with: sdpa, eager for gpt-oss (no sdpa: sinks)."""
    return "eager" if family == "gpt_oss" else "sdpa"


def build(family, impl, dtype=BF16, seed=0):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(family), attn_implementation=impl, dtype=dtype)
    return model.eval()


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_model_forward_equals_transformers_attention(family, calls):
    """Prefill of 3 left-padded prompts (20, 13, 5 tokens; windows of 8 slide) then one decode step
    with the cache: the logits equal the reference implementation's, and kernelgen's function saw
    the family's arguments."""
    ours, ref = build(family, "kernelgen"), build(family, reference_implementation(family))
    ref.load_state_dict(ours.state_dict())
    lens, n = [20, 13, 5], 20
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 128, (3, n), generator=g)
    mask = torch.tensor([[0] * (n - L) + [1] * L for L in lens])
    nxt = torch.randint(3, 128, (3, 1), generator=g)
    mask2 = torch.cat([mask, torch.ones(3, 1, dtype=mask.dtype)], 1)
    logits = {}
    with torch.no_grad():
        for name, m in (("kernelgen", ours), ("ref", ref)):
            o = m(input_ids=ids, attention_mask=mask, use_cache=True)
            o2 = m(input_ids=nxt, attention_mask=mask2, past_key_values=o.past_key_values, use_cache=True)
            logits[name] = (o.logits, o2.logits)
    valid = mask.bool()
    for a, b in ((logits["kernelgen"][0][valid], logits["ref"][0][valid]), (logits["kernelgen"][1], logits["ref"][1])):
        torch.testing.assert_close(a.float(), b.float(), atol=3e-2, rtol=3e-2)
    assert len(calls) == 2 * 2                                     # 2 layers x (prefill, decode)
    (pre, kw), (pre1, kw1) = calls[0], calls[1]
    assert pre[3].tolist() == [0, 20, 40, 60] and pre[4].tolist() == [0, 27, 55, 60]   # pads 0, 7, 15
    assert kw["seqused_k"].tolist() == [20, 13, 5]
    assert pre[0].shape == (60, 4, 64) and pre[1].shape == (60, 2, 64)
    dec = calls[2][0]
    assert dec[3].tolist() == [0, 1, 2, 3] and dec[0].shape == (3, 4, 64)
    assert kw["causal"] and kw1["causal"]
    windows = [c[1]["window_size"] for c in calls[:2]]
    expected = {"llama": [(-1, -1)] * 2, "qwen2": [(-1, -1)] * 2, "mistral": [(7, 0)] * 2,
                "gemma2": [(7, 0), (-1, -1)], "gpt_oss": [(7, 0), (-1, -1)]}[family]
    assert windows == expected
    assert all(c[1]["softcap"] == (50.0 if family == "gemma2" else 0.0) for c in calls)
    assert all(("sinks" in c[1]) == (family == "gpt_oss") for c in calls)
    scale = 64 ** -0.5
    assert all(abs(c[1]["softmax_scale"] - scale) < 1e-9 for c in calls)


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt_oss"])
def test_paged_kernelgen_continuous_batching_equals_generate(family, calls, monkeypatch):
    """transformers' continuous batching (``generate_batch``, which switches the model to
    ``paged|kernelgen``) gives the tokens of plain ``generate`` with ``kernelgen``: prompts of 11, 3
    and 13 tokens, 6 new tokens each (windows of 8 slide), in pages of 16 tokens."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    from transformers.generation.continuous_batching import cache as cb_cache

    # on the CPU transformers sizes the cache from psutil's free memory (0 without psutil)
    monkeypatch.setattr(cb_cache.PagedAttentionMemoryHandler, "get_available_memory", lambda self: 1 << 30)
    model = build(family, "kernelgen")
    gc = transformers.GenerationConfig(max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    cbc = ContinuousBatchingConfig(block_size=16, num_blocks=16, max_batch_tokens=64, use_cuda_graph=False,
                                   use_async_batching=False)
    prompts = [list(range(5, 16)), [20, 21, 22], [30, 31, 32] * 4 + [33]]
    with torch.no_grad():
        out = model.generate_batch(prompts, generation_config=gc, continuous_batching_config=cbc, progress_bar=False,
                                   warmup=False)
        paged = [out[k].generated_tokens for k in sorted(out, key=lambda r: int(r.split("_")[1]))]
        paged_calls = len(calls)
        model.set_attn_implementation("kernelgen")
        plain = [model.generate(torch.tensor([p]), generation_config=gc)[0, len(p):].tolist() for p in prompts]
    assert paged == plain
    assert paged_calls >= 2 * 6
    first = calls[0]     # the three prompts in one packed batch: only the paged path packs them
    assert first[0][0].shape == (27, 4, 64) and sorted(first[0][3].diff().tolist()) == [3, 11, 13]
    assert first[1]["causal"] and first[0][3].dtype == torch.int32
    assert all(("sinks" in c[1]) == (family == "gpt_oss") for c in calls[:paged_calls])
    assert all(c[1]["softcap"] == (50.0 if family == "gemma2" else 0.0) for c in calls[:paged_calls])
    if family != "llama":
        assert {c[1]["window_size"] for c in calls[:paged_calls]} == {(7, 0), (-1, -1)}


def test_position_ids_are_read_once_per_forward(calls, monkeypatch):
    """A prefill without a mask checks position_ids for packed sequences (two host syncs); every
    layer gets the same position_ids object, so the check runs once per forward (as the mask's
    layout does), and a new or rewritten position_ids is read again."""
    q, k, v = qkv(b=1, sq=7, sk=7)
    seen = []
    real = kh._read_packed
    monkeypatch.setattr(kh, "_read_packed", lambda p: seen.append(1) or real(p))
    pos = torch.tensor([[0, 1, 2, 0, 1, 2, 3]])
    for _ in range(3):
        kh.kernelgen_attention_forward(Module(), q, k, v, None, position_ids=pos)
    assert len(seen) == 1 and all(c[0][3].tolist() == [0, 3, 7] for c in calls)
    pos[0, 3:] = torch.arange(3, 7)                    # rewritten in place: one run now
    kh.kernelgen_attention_forward(Module(), q, k, v, None, position_ids=pos)
    assert len(seen) == 2 and calls[-1][0][3].tolist() == [0, 7]
    run = torch.arange(7).view(1, 7)                   # a new object, one run: the result None is kept too
    for _ in range(2):
        kh.kernelgen_attention_forward(Module(), q, k, v, None, position_ids=run)
    assert len(seen) == 3 and calls[-1][0][3].tolist() == [0, 7]
    with torch.inference_mode():                       # no version counter: once per forward, by layer
        ipos = torch.tensor([[0, 1, 2, 0, 1, 2, 3]])
        for layer in range(2):
            kh.kernelgen_attention_forward(Module(layer=layer), q, k, v, None, position_ids=ipos)
        assert len(seen) == 4 and calls[-1][0][3].tolist() == [0, 3, 7]
        ipos[0, 3:] = torch.arange(3, 7)               # the next forward, rewritten in place
        kh.kernelgen_attention_forward(Module(layer=0), q, k, v, None, position_ids=ipos)
        assert len(seen) == 5 and calls[-1][0][3].tolist() == [0, 7]


def test_head_dims_and_tested_versions_are_the_projects():
    """The integration's head-dim check is kernelgen's own list (not a copy that can drift), and
    TESTED_VERSIONS is the range pyproject's ``transformers`` extra pins (and that the installed
    transformers the tests ran with satisfies)."""
    import re
    from pathlib import Path

    from kernelgen.kernels import spec

    assert kh.HEAD_DIMS is spec.HEAD_DIMS
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    extra = re.search(r'^transformers = \["transformers([^"]+)"\]', pyproject, re.M)
    assert extra is not None and extra.group(1) == kh.TESTED_VERSIONS
    import transformers
    major_minor = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    lo, hi = (tuple(int(x) for x in m.split(".")) for m in re.findall(r"[<>]=?(\d+\.\d+)", kh.TESTED_VERSIONS))
    assert lo <= major_minor < hi


def test_left_padded_query_rows_causal_zeros_noncausal_real_keys(calls):
    """docs/transformers.md: on the left-padding path a padded query row gets zeros under causal
    and, without causal, the attention over the request's real keys (what sdpa's padding mask gives)."""
    q, k, v = qkv(b=2, sq=5, sk=5)
    mask = torch.tensor([[1] * 5, [0, 0, 1, 1, 1]])
    out_c, _ = kh.kernelgen_attention_forward(Module(), q, k, v, mask)
    assert out_c[1, :2].abs().max() == 0 and out_c[1, 2:].abs().max() > 0
    out_n, _ = kh.kernelgen_attention_forward(Module(is_causal=False), q, k, v, mask)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q[1:, :, :2].float(), k[1:, :, 2:].float().repeat_interleave(2, 1),
        v[1:, :, 2:].float().repeat_interleave(2, 1))                        # (1, Hq, 2, D)
    torch.testing.assert_close(out_n[1, :2].float(), ref[0].transpose(0, 1), atol=2e-2, rtol=2e-2)


def test_unpadded_cu_seqlens_are_made_once_per_shape(calls, monkeypatch):
    """An unpadded batch (mask None, as generate's decode steps of one prompt) gets its uniform
    cu_seqlens made once per (batch, Sq, Sk, device), not two new tensors in every layer."""
    made = []
    real = torch.arange
    # (the float32 reference the fixture calls makes int64 aranges of its own: not counted)
    monkeypatch.setattr(kh.torch, "arange",
                        lambda *a, **kw: (kw.get("dtype") == torch.int32 and made.append(a)) or real(*a, **kw))
    kh._UNIFORM.clear()
    q, k, v = qkv(b=2, sq=1, sk=6)
    for _ in range(4):                                  # four layers of one decode step
        kh.kernelgen_attention_forward(Module(), q, k, v, None)
    assert len(made) == 2
    assert all(c[0][3].tolist() == [0, 1, 2] and c[0][4].tolist() == [0, 6, 12] for c in calls)
    q, k, v = qkv(b=2, sq=1, sk=7)                      # the next step: one new pair
    kh.kernelgen_attention_forward(Module(), q, k, v, None)
    assert len(made) == 4 and calls[-1][0][4].tolist() == [0, 7, 14]


def test_encoder_decoder_cross_attention_equals_sdpa(calls):
    """Bart: the decoder's cross-attention takes every decoder query over its request's real encoder
    tokens (the 2-D mask is the encoder's padding; the queries were taken from its last columns: a
    right-padded request's rows came out zero, and a decoder longer than the encoder raised), also
    with a decoder longer than the encoder."""
    cfg = transformers.BartConfig(vocab_size=128, d_model=128, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
                                  decoder_ffn_dim=128, max_position_embeddings=64)
    for n_enc, n_dec in ((8, 3), (4, 6)):
        emask = torch.tensor([[1] * n_enc, [1] * (n_enc - 3) + [0] * 3])
        g = torch.Generator().manual_seed(n_enc)
        ids, dec = torch.randint(3, 128, (2, n_enc), generator=g), torch.randint(3, 128, (2, n_dec), generator=g)
        logits = {}
        for impl in ("sdpa", "kernelgen"):
            torch.manual_seed(0)
            m = transformers.BartForConditionalGeneration(cfg).to(BF16).eval()
            m.set_attn_implementation(impl)
            with torch.no_grad():
                logits[impl] = m(input_ids=ids, attention_mask=emask, decoder_input_ids=dec).logits
        torch.testing.assert_close(logits["kernelgen"].float(), logits["sdpa"].float(), atol=3e-2, rtol=3e-2)
    cross = [c for c in calls if not c[1]["causal"] and c[0][0].shape[0] == 2 * n_dec]
    assert cross and cross[-1][0][4].tolist() == [0, 4, 5]   # the encoder's real tokens: 4 and 1
