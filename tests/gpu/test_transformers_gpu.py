"""GPU: tiny random-weight Hugging Face models (Llama, Qwen2, Mistral, Gemma-2, gpt-oss) run with
attn_implementation="kernelgen" give transformers' own attention's logits and tokens.

Per family, one set of float32 weights is loaded three times: a float32 run of transformers'
attention (sdpa; eager for gpt-oss, which has no sdpa) is the truth, and a bfloat16 run of that
same attention and a bfloat16 kernelgen run are compared with it over a left-padded batch of
prompts (37, 20 and 5 tokens, so the windows of 8 slide and padding is exercised):

- logits of the prefill and of 16 decode steps with a DynamicCache, teacher-forced with the
  float32 run's greedy tokens (so the three runs see the same inputs at every step);
- criterion: kernelgen's error against the float32 truth (max and mean absolute logit error over
  the real tokens) is at most ``FACTOR`` = 2 times the bf16 reference's own error.  Both runs
  round every matmul input and activation to bf16 the same way; the attention kernels differ only
  in the order of fp32 accumulation and where P is rounded, which changes the error by far less
  than 2x, while a mask, window, scale, soft-cap or sink mistake gives errors of the order of the
  logits themselves (tens of times the bf16 error);
- tokens: greedy ``generate`` (16 new tokens) with kernelgen and with the bf16 reference give the
  same token at every step whose context is still the float32 truth's and where the truth's top-1
  margin exceeds twice the sum of the two runs' logit errors at that step (measured in the
  teacher-forced runs; there neither argmax can differ from the truth's); below that margin the
  tokens may differ, and the first difference ends the comparison of that row (random-weight
  models have flat logits, so some steps are always below it).

Tiny configs (2 layers, hidden 256, 4 query / 2 KV heads; head dim 64, 128 for Llama) keep it to a
few seconds per family after the kernels are compiled.
"""

import pytest
import torch

transformers = pytest.importorskip("transformers")

import kernelgen.integrations.transformers  # noqa: E402,F401  (registers "kernelgen")

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
FACTOR = 2.0
LENS = [37, 20, 5]
STEPS = 16
FAMILIES = ["llama", "qwen2", "mistral", "gemma2", "gpt_oss"]
DEVICE = "cuda"


def tiny_config(family):
    common = dict(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64)
    if family == "llama":
        return transformers.LlamaConfig(**{**common, "head_dim": 128})
    if family == "qwen2":
        return transformers.Qwen2Config(**common)
    if family == "mistral":
        return transformers.MistralConfig(sliding_window=8, **common)
    if family == "gemma2":
        return transformers.Gemma2Config(sliding_window=8, attn_logit_softcapping=50.0, query_pre_attn_scalar=64,
                                         **common)
    if family == "gpt_oss":   # both experts used by every token: top-k routing of 4 experts flips between bf16 and
        # float32 runs on near ties and gives logit errors of 0.6 unrelated to attention (seen with the CPU stand-in)
        return transformers.GptOssConfig(sliding_window=8, num_local_experts=2, num_experts_per_tok=2,
                                         max_position_embeddings=131072, **common)
    raise KeyError(family)


def reference_implementation(family):
    return "eager" if family == "gpt_oss" else "sdpa"


def models(family):
    torch.manual_seed(0)
    cfg = tiny_config(family)
    ref32 = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=reference_implementation(family),
                                                          dtype=torch.float32).to(DEVICE).eval()
    state = ref32.state_dict()
    out = {"ref32": ref32}
    for name, impl in (("ref16", reference_implementation(family)), ("kernelgen", "kernelgen")):
        m = transformers.AutoModelForCausalLM.from_config(tiny_config(family), attn_implementation=impl, dtype=BF16)
        m.load_state_dict({k: v.to(BF16) if v.is_floating_point() else v for k, v in state.items()})
        m.generation_config.eos_token_id = None     # 16 tokens, none treated as an end
        out[name] = m.to(DEVICE).eval()
    return out


def prompts(vocab):
    g = torch.Generator().manual_seed(1)
    n = max(LENS)
    ids = torch.randint(3, vocab, (len(LENS), n), generator=g)
    mask = torch.tensor([[0] * (n - L) + [1] * L for L in LENS])
    return ids.to(DEVICE), mask.to(DEVICE)


def teacher_forced_logits(model, ids, mask, tokens):
    """Prefill logits at the real tokens, then one (batch, vocab) row per decode step fed ``tokens``
    (batch, STEPS), with generate's position ids (mask cumsum)."""
    out = []
    with torch.no_grad():
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        o = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        out.append(o.logits.float()[mask.bool()])
        cache, nxt = o.past_key_values, o.logits[:, -1].argmax(-1)
        for t in range(STEPS):
            tok = tokens[:, t] if tokens is not None else nxt
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            pos = mask.sum(-1, keepdim=True) - 1
            o = model(input_ids=tok[:, None], attention_mask=mask, position_ids=pos, past_key_values=cache,
                      use_cache=True)
            cache = o.past_key_values
            out.append(o.logits.float()[:, -1])
            nxt = o.logits[:, -1].argmax(-1)
    return out


def greedy_tokens(model, ids, mask):
    """The float32 truth's greedy tokens (batch, STEPS), fed back one at a time."""
    toks = []
    with torch.no_grad():
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        o = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
        cache, nxt = o.past_key_values, o.logits[:, -1].argmax(-1)
        for _ in range(STEPS):
            toks.append(nxt)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            pos = mask.sum(-1, keepdim=True) - 1
            o = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, past_key_values=cache,
                      use_cache=True)
            cache, nxt = o.past_key_values, o.logits[:, -1].argmax(-1)
    return torch.stack(toks, 1)


def errors(run, truth):
    diff = torch.cat([(a - b).abs().reshape(-1) for a, b in zip(run, truth)])
    return diff.max().item(), diff.mean().item()


@pytest.fixture
def no_tf32():
    """The float32 truth in float32 (cuBLAS's matmul setting is not a plain attribute: no monkeypatch)."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_and_tokens_match_transformers_attention(family, no_tf32):
    m = models(family)
    ids, mask = prompts(m["ref32"].config.vocab_size)
    tokens = greedy_tokens(m["ref32"], ids, mask)
    runs = {name: teacher_forced_logits(model, ids, mask, tokens) for name, model in m.items()}
    kg_max, kg_mean = errors(runs["kernelgen"], runs["ref32"])
    ref_max, ref_mean = errors(runs["ref16"], runs["ref32"])
    report = f"{family}: kernelgen max/mean err {kg_max:.3e}/{kg_mean:.3e}, bf16 {reference_implementation(family)} " \
             f"{ref_max:.3e}/{ref_mean:.3e}"
    print(report)
    assert all(torch.isfinite(x).all() for x in runs["kernelgen"]), report
    assert kg_max <= FACTOR * ref_max and kg_mean <= FACTOR * ref_mean, report

    # greedy generate, kernelgen vs the bf16 reference, compared where the truth's margin allows
    gen = {}
    with torch.no_grad():
        for name in ("kernelgen", "ref16"):
            gen[name] = m[name].generate(input_ids=ids, attention_mask=mask, max_new_tokens=STEPS, do_sample=False,
                                         pad_token_id=0)[:, ids.shape[1]:]
    last = torch.tensor(LENS).cumsum(0) - 1                       # each row's last real prompt token

    def step_logits(name, t):                                      # (batch, vocab): the logits choosing token t
        return runs[name][0][last] if t == 0 else runs[name][t]

    compared = 0
    for b in range(len(LENS)):
        for t in range(STEPS):
            if not torch.equal(gen["ref16"][b, :t], tokens[b, :t]) or \
                    not torch.equal(gen["kernelgen"][b, :t], gen["ref16"][b, :t]):
                break                                              # contexts differ from the truth's from here on
            truth = step_logits("ref32", t)[b]
            bound = 2 * sum((step_logits(n, t)[b] - truth).abs().max().item() for n in ("kernelgen", "ref16"))
            top2 = truth.topk(2).values
            if (top2[0] - top2[1]).item() > bound:
                assert gen["kernelgen"][b, t] == gen["ref16"][b, t], f"{report}; row {b} step {t}"
                compared += 1
    print(f"{family}: {compared} of {len(LENS) * STEPS} generated tokens compared (truth margin above twice "
          f"the two runs' errors at that step), all equal")
    assert compared > 0, report


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_continuous_batching_on_paged_kernelgen(family, no_tf32):
    """transformers' continuous batching (``generate_batch``: the model runs ``paged|kernelgen``,
    K/V in a paged cache of 16-token blocks, all requests packed in one varlen call per layer)
    gives the float32 truth's greedy tokens wherever the truth's margin exceeds four times the
    logit error the padded-batch kernelgen run had at that step (twice the argmax bound, and twice
    again for the other batching: the same kernels, another split of the work)."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    m = models(family)
    ids, mask = prompts(m["ref32"].config.vocab_size)
    tokens = greedy_tokens(m["ref32"], ids, mask)
    runs = {name: teacher_forced_logits(m[name], ids, mask, tokens) for name in ("ref32", "kernelgen")}
    last = torch.tensor(LENS).cumsum(0) - 1
    model = m["kernelgen"]
    gc = transformers.GenerationConfig(max_new_tokens=STEPS, do_sample=False, eos_token_id=None, pad_token_id=0)
    cbc = ContinuousBatchingConfig(block_size=16, num_blocks=32, max_batch_tokens=128, use_cuda_graph=False,
                                   use_async_batching=False)
    inputs = [ids[b, ids.shape[1] - L:].tolist() for b, L in enumerate(LENS)]
    with torch.no_grad():
        out = model.generate_batch(inputs, generation_config=gc, continuous_batching_config=cbc, progress_bar=False,
                                   warmup=False)
    got = [out[k].generated_tokens for k in sorted(out, key=lambda r: int(r.split("_")[1]))]
    assert [len(g) for g in got] == [STEPS] * len(LENS)
    compared = 0
    for b in range(len(LENS)):
        for t in range(STEPS):
            if got[b][:t] != tokens[b, :t].tolist():
                break
            truth = runs["ref32"][0][last][b] if t == 0 else runs["ref32"][t][b]
            ours = runs["kernelgen"][0][last][b] if t == 0 else runs["kernelgen"][t][b]
            top2 = truth.topk(2).values
            if (top2[0] - top2[1]).item() > 4 * (ours - truth).abs().max().item():
                assert got[b][t] == tokens[b, t].item(), f"{family}: row {b} step {t}"
                compared += 1
    print(f"{family} continuous batching: {compared} of {len(LENS) * STEPS} tokens compared, all equal")
    assert compared > 0
