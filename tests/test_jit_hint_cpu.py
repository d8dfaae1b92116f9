"""CPU: with ``KERNELGEN_DISABLE_JIT=1`` a call whose kernel is not cached names the ``kernelgen
warmup`` command that builds it (``selection.catalog.warmup_command``, ``front.jit_hint``), where the
cache's own message could only say ``kernelgen warmup --arch ARCH ...``.  Each command is checked by
running its flags through the CLI's own parser and catalog (``apps.cli.warmup_catalog``)."""
import shlex

import pytest

from kernelgen.apps import cli
from kernelgen.front import jit_hint
from kernelgen.jit import cache
from kernelgen.kernels.variant_code import VariantCode
from kernelgen.selection import catalog, heuristics


@pytest.fixture(autouse=True)
def _no_time_bound(monkeypatch):
    """The search's time bound off: no result here depends on the machine's speed."""
    monkeypatch.setattr(catalog, "WARMUP_COMMAND_BUDGET_S", None)


def _built_by(command: str) -> list:
    """The specs the ``kernelgen warmup`` command would build (its parsed flags, as ``cmd_warmup``)."""
    argv = shlex.split(command)
    assert argv[:2] == ["kernelgen", "warmup"], command
    args = cli.build_parser().parse_args(argv[1:])
    return cli.warmup_catalog(args, args.arch)


def _serving_specs(arch, d, dtype="bf16", **kw):
    return catalog.warmup_specs(arch, head_dims=(d,), dtypes=(dtype,), phases=("prefill", "chunked", "decode"),
                                gqas=(1, 4, 8), paged=(False, True), unsplit=True, **kw)


@pytest.mark.parametrize("arch,d,kw", [
    ("sm_90a", 128, {}),
    ("sm_90a", 64, dict(kv_dtypes=("e4m3",))),
    ("sm_90a", 256, dict(softcap=True, windows=(4096,))),
    ("sm_90a", (192, 128), {}),
    ("sm_80", 96, dict(alibi=True)),
    ("sm_90a", 64, dict(sinks=True, windows=(128,))),
])
def test_every_serving_kernel_gets_a_command_that_builds_it(arch, d, kw):
    """Every kernel of a serving option set (attention, scheduler, combine at each row-warp count,
    the fused mixed-batch kernels, FP8 q quantisation) gets a command, and the command's own set holds it."""
    specs = _serving_specs(arch, d, **kw)
    kinds = {s.kind for s in specs}
    assert {"attention", "scheduler", "combine"} <= kinds, kinds
    for s in specs:
        cmd = catalog.warmup_command(s)
        assert cmd is not None, s.name
        assert s in _built_by(cmd), (s.name, cmd)


def test_the_command_is_the_smallest_set_that_holds_the_kernel():
    """A plain prefill kernel needs no call-shape flags; a paged decode kernel with packed GQA needs
    the phases and the query-head ratios, and its flags name the paged cache."""
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                          max_seqlen_q=4096, max_seqlen_k=4096)
    assert catalog.warmup_command(v.attention) == \
        "kernelgen warmup --arch sm_90a --head-dim 128 --dtype bf16 --layout soa --causal"
    decode = [s for s in _serving_specs("sm_90a", 128) if s.kind == "attention" and s.paged and s.pack_gqa]
    assert decode
    cmd = catalog.warmup_command(decode[0])
    assert "--paged" in cmd or "--serving" in cmd, cmd
    assert decode[0] in _built_by(cmd)


def test_a_user_variant_gets_no_command():
    """``--variant FILE`` needs the caller's file: no command, and the message keeps its "..."."""
    code = VariantCode(score_mod="score * 0.5f")
    spec = catalog.warmup_specs("sm_90a", head_dims=(64,), dtypes=("bf16",), causals=(True,), layouts=("soa",),
                                variants=(code,))[0]
    attn = spec if spec.kind == "attention" else next(
        s for s in catalog.warmup_specs("sm_90a", head_dims=(64,), dtypes=("bf16",), causals=(True,),
                                        layouts=("soa",), variants=(code,)) if s.kind == "attention")
    assert attn.variant is not None and catalog.warmup_command(attn) is None
    err = cache.KernelNotCachedError(f"... pre-build it with `kernelgen warmup --arch sm_90a ...` ...", spec=attn)
    assert jit_hint.completed(err) is None


def test_the_entry_points_complete_the_cache_error(tmp_path, monkeypatch):
    """The cache's error for a missing kernel (JIT disabled) carries the spec; an entry point's
    ``except`` block (``raise_with_command``) re-raises it with the command in place of "...", the rest of the message
    (kernel, key, cache directory) kept, and an error completed once is not completed again."""
    v = heuristics.choose("sm_90a", "bf16", 64, 64, num_heads_q=8, num_heads_kv=8, mask="none",
                          max_seqlen_q=1024, max_seqlen_k=1024)
    monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
    c = cache.KernelCache(tmp_path / "c")

    def call():
        try:
            return c.get(v.attention)
        except cache.KernelNotCachedError as e:
            jit_hint.raise_with_command(e)
            raise

    with pytest.raises(cache.KernelNotCachedError) as ei:
        call()
    msg = str(ei.value)
    # (1 x 1024 non-causal: a split-KV kernel, which the prefill phase alone does not build)
    cmd = "kernelgen warmup --arch sm_90a --head-dim 64 --dtype bf16 --layout soa --no-causal --phase prefill,chunked,decode"
    assert v.attention.split and catalog.warmup_command(v.attention) == cmd
    assert f"`{cmd}`" in msg and "..." not in msg, msg
    assert v.attention.name in msg and str(tmp_path / "c") in msg and ei.value.spec == v.attention
    assert v.attention in _built_by(cmd)
    assert jit_hint.completed(ei.value) is None
    # the public entry points load their kernels inside the block
    import inspect
    from kernelgen.front import api, plan
    for fn in (api.varlen_attention, plan.AttentionPlan.__init__):
        assert "jit_hint.raise_with_command(e" in inspect.getsource(fn), fn


def test_the_scheduler_error_names_the_command_of_the_whole_call():
    """The call's first missing kernel is its scheduler (``runtime.load`` takes ``recipe.specs`` in
    order), whose own command (``--arch --layout``) builds prefill kernels but not the call's: with the
    call's specs the command builds all of them (llama3-8b's paged decode, page size 16)."""
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal", max_seqlen_q=1,
                          max_seqlen_k=8192, paged=True, page_size=16)
    specs = [s for s in (v.scheduler, v.attention, v.combine) if s is not None]
    assert specs[0].kind == "scheduler" and len(specs) == 3
    alone = catalog.warmup_command(specs[0])
    assert alone == "kernelgen warmup --arch sm_90a --layout soa" and v.attention not in _built_by(alone)
    err = cache.KernelNotCachedError(f"kernel {specs[0].name} ... pre-build it with `kernelgen warmup --arch sm_90a ...` "
                                     f"(with --cache-dir X)", spec=specs[0])
    msg = str(jit_hint.completed(err, specs))
    cmd = msg[msg.index("`") + 1:msg.index("`", msg.index("`") + 1)]
    assert set(specs) <= set(_built_by(cmd)), cmd
    assert msg.startswith(f"kernel {specs[0].name}") and "(with --cache-dir X)" in msg


def test_wide_gqa_decode_kernels_get_a_command():
    """Speculative decode (4 query tokens) on contiguous K/V with 5 query heads per KV head (Qwen2.5-14B,
    40 / 8) takes a packed-GQA split kernel that ``--gqa 1,4,8`` does not build: the wide-GQA set does."""
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=40, num_heads_kv=8, mask="causal", max_seqlen_q=4,
                          max_seqlen_k=4096)
    assert v.attention.pack_gqa and v.attention.split
    cmd = catalog.warmup_command(v.attention)
    assert "--gqa 1,2,4,5,8,16,32,64" in cmd and v.attention in _built_by(cmd)
    for ps in (16, 32):   # on pages too (the command's flags parse: --both-paged, not --paged beside it)
        p = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=40, num_heads_kv=8, mask="causal",
                              max_seqlen_q=4, max_seqlen_k=4096, paged=True, page_size=ps).attention
        cmd = catalog.warmup_command(p)
        assert cmd is not None and p in _built_by(cmd), (p.name, cmd)


def test_the_command_carries_the_environment_it_was_chosen_under(monkeypatch):
    """Kernels chosen under ``KERNELGEN_SM90_OPTS`` are built by the command only under it: it leads
    the command.  An environment the settings refuse gives no command, and the error stays as it was
    (a hint never replaces the error it completes)."""
    monkeypatch.setenv("KERNELGEN_SM90_OPTS", "t")
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="none",
                          max_seqlen_q=4096, max_seqlen_k=4096, sm90_opts="t")
    cmd = catalog.warmup_command(v.attention)
    assert cmd.startswith("KERNELGEN_SM90_OPTS=t kernelgen warmup "), cmd
    assert v.attention in _built_by(cmd.split(" ", 1)[1])
    monkeypatch.setenv("KERNELGEN_SM90_PACK_GQA", "sometimes")
    assert catalog.warmup_command(v.attention) is None
    err = cache.KernelNotCachedError("... `kernelgen warmup --arch sm_90a ...` ...", spec=v.attention)
    assert jit_hint.completed(err) is None


def test_a_search_past_its_bound_gives_no_command():
    """A bound of 0 s stops the search before its first set (the entry points' bound is 2 s:
    ``WARMUP_COMMAND_BUDGET_S``), and the error keeps its "..."."""
    v = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=32, num_heads_kv=8, mask="causal",
                          max_seqlen_q=4096, max_seqlen_k=4096)
    assert catalog.warmup_command(v.attention) is not None
    assert catalog.warmup_command(v.attention, budget_s=0) is None
