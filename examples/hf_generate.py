"""Hugging Face ``model.generate`` on kernelgen: a batch of prompts of different lengths through a
random-weight Llama-style model, timed with ``attn_implementation="kernelgen"`` and with
``"sdpa"``, and the generated tokens compared.

No downloads: the model is built from a config with random weights (sizes on the command line),
the prompts are random token ids, left-padded as ``generate`` expects.  Greedy decoding, so the
two runs differ only where bf16 rounding flips an argmax of nearly tied logits (random weights
give flat logits): the output says how many rows are equal and where the first one differs.

    python examples/hf_generate.py                       # tiny model (2 layers, hidden 256)
    python examples/hf_generate.py --layers 16 --hidden 2048 --heads 32 --kv-heads 8 --batch 32

Prints one line per implementation (``tokens/s`` counts generated tokens only, the best of
``--repeats`` runs after one warm-up generate that compiles kernelgen's kernels), how far apart
the two implementations' prefill logits are, and a line ``match: ...``.  Needs a CUDA GPU; without
one it says so and exits 2 (as examples/tensor_parallel.py does).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=64, help="64, 96, 128, 192 or 256")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--batch", type=int, default=8, help="prompts")
    p.add_argument("--min-len", type=int, default=16, help="shortest prompt (tokens)")
    p.add_argument("--max-len", type=int, default=512, help="longest prompt (tokens)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=3, help="timed generate runs per implementation (best counts)")
    return p.parse_args(argv)


def build(args):
    import transformers

    import kernelgen.integrations.transformers  # noqa: F401  (registers attn_implementation="kernelgen")

    cfg = transformers.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                                   num_hidden_layers=args.layers, num_attention_heads=args.heads,
                                   num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                                   max_position_embeddings=max(4096, args.max_len + args.new_tokens))
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.bfloat16)
    model.generation_config.eos_token_id = None          # always args.new_tokens tokens
    model.generation_config.pad_token_id = 0
    return model.cuda().eval()


def prompts(args):
    g = torch.Generator().manual_seed(args.seed + 1)
    lens = torch.randint(args.min_len, args.max_len + 1, (args.batch,), generator=g).tolist()
    n = max(lens)
    ids = torch.randint(3, args.vocab, (args.batch, n), generator=g)
    mask = torch.tensor([[0] * (n - L) + [1] * L for L in lens])
    ids = ids.masked_fill(mask == 0, 0)
    return ids.cuda(), mask.cuda(), lens


def generate(model, impl, ids, mask, new_tokens, repeats):
    """Generated tokens (batch, new_tokens), the best time of ``repeats`` runs (s) and the prefill's
    last-token logits (batch, vocab) float32."""
    model.set_attn_implementation(impl)
    with torch.inference_mode():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=False)   # warm-up
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=False)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1].float()
    return out[:, ids.shape[1]:], min(times), logits


def main(argv=None) -> int:
    args = parse(argv)
    if not torch.cuda.is_available():
        print("hf_generate: needs a CUDA GPU")
        return 2
    model = build(args)
    ids, mask, lens = prompts(args)
    print(f"hf_generate: Llama-style {args.layers} layers, hidden {args.hidden}, heads {args.heads}/{args.kv_heads} x "
          f"{args.head_dim}, bf16, {torch.cuda.get_device_name()}; {args.batch} prompts of {min(lens)}-{max(lens)} "
          f"tokens (left-padded to {ids.shape[1]}), {args.new_tokens} new tokens each, greedy")
    tokens, logits = {}, {}
    for impl in ("sdpa", "kernelgen"):
        out, dt, logits[impl] = generate(model, impl, ids, mask, args.new_tokens, args.repeats)
        tokens[impl] = out
        n = out.numel()
        print(f"{impl:>9}: {n} tokens in {dt:.3f} s = {n / dt:,.0f} tokens/s (best of {args.repeats})")
    diff = (logits["kernelgen"] - logits["sdpa"]).abs().max().item()
    top2 = logits["sdpa"].topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1])
    print(f"prefill last-token logits: max |kernelgen - sdpa| = {diff:.3e} "
          f"(logit std {logits['sdpa'].std().item():.3e}; top-1 margins {margin.min().item():.1e}-"
          f"{margin.max().item():.1e}: random weights give near ties)")
    a, b = tokens["kernelgen"], tokens["sdpa"]
    same_rows = int((a == b).all(dim=1).sum())
    diff = (a != b)
    first = [int(r.nonzero()[0]) if r.any() else None for r in diff]
    firsts = sorted(f for f in first if f is not None)
    print(f"match: {same_rows}/{args.batch} rows identical, {int((~diff).sum())}/{a.numel()} tokens equal"
          + (f"; first differing step per differing row: {firsts}" if firsts else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
