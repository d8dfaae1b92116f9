"""The one decider (``selection.decide``) on the CPU: a call signature and a described device in,
a launch recipe out, with no CUDA, no fake driver and no environment (overrides are ``Settings``)."""
import dataclasses
import subprocess
import sys

import pytest

from kernelgen.kernels.device import Device, arch_for_capability
from kernelgen.kernels.recipe import Recipe
from kernelgen.kernels.workspace import FusedWorkspace, WorkspaceLayout
from kernelgen.selection import decide, heuristics
from kernelgen.selection.settings import Settings

H200 = Device("H200", (9, 0), 132, 60 * 2 ** 20, 232448)
A100 = Device("A100", (8, 0), 108, 40 * 2 ** 20, 166912)


def sig(**kw) -> decide.CallSignature:
    """A causal bf16 Llama-3-8B call (32 x 8 heads, d 128): a packed 4096-token prefill of 2 requests."""
    base = dict(dtype="bf16", head_dim=128, head_dim_v=128, num_heads_q=32, num_heads_kv=8, mask="causal",
                window_left=-1, layout="soa", max_seqlen_q=2048, max_seqlen_k=2048, paged=False, page_size=0,
                softcap=False, pack_gqa=None, num_splits=0, short_query_tokens=None, arch=None, tma_ok=True,
                batch=2, rows=4096)
    return decide.CallSignature(**{**base, **kw})


#: A paged batch mixing prefill chunks and decodes: 8 requests, 4096 query tokens, at most 2048 a request.
MIXED = dict(paged=True, page_size=16, max_seqlen_q=2048, max_seqlen_k=8192, batch=8, rows=600)


def test_the_device_description():
    assert (H200.arch, A100.arch) == ("sm_90a", "sm_80")
    assert arch_for_capability(8, 7) == "sm_86" and arch_for_capability(8, 9) == "sm_89"
    with pytest.raises(RuntimeError, match="compute capability 7.5 is not supported"):
        Device("T4", (7, 5), 40, 4 * 2 ** 20).arch
    raw = {"name": b"NVIDIA H200", "major": 9, "minor": 0, "multiProcessorCount": 132, "l2CacheSize": 62914560,
           "sharedMemPerBlockOptin": 232448}
    assert Device.from_properties(raw) == Device("NVIDIA H200", (9, 0), 132, 62914560, 232448)


B200 = Device("B200", (10, 0), 148, 126 * 2 ** 20, 232448)
RTX5090 = Device("RTX 5090", (12, 0), 170, 96 * 2 ** 20, 101376)


@pytest.mark.parametrize("device, arch", [(B200, "sm_100"), (RTX5090, "sm_120")])
def test_blackwell_is_refused_unless_allowed_then_takes_the_sm80_path(device, arch):
    """Compute capability 10.x / 12.x: refused by default with a message naming the switch; with
    KERNELGEN_ALLOW_UNTESTED_ARCH=1 (Settings.allow_untested_arch) the sm_80 path compiled for the
    device's own arch, never the Hopper kernel."""
    with pytest.raises(RuntimeError, match=rf"compute capability {device.cc[0]}\.0 \(Blackwell\) is not "
                                           rf"supported.*KERNELGEN_ALLOW_UNTESTED_ARCH=1.*{arch}"):
        decide.decide(sig(), device)
    with pytest.raises(RuntimeError, match="KERNELGEN_ALLOW_UNTESTED_ARCH"):
        device.arch
    allow = Settings.from_env({"KERNELGEN_ALLOW_UNTESTED_ARCH": "1"})
    assert allow.allow_untested_arch and not Settings.from_env({}).allow_untested_arch
    assert not Settings.from_env({"KERNELGEN_ALLOW_UNTESTED_ARCH": "0"}).allow_untested_arch
    for s in (sig(), sig(**MIXED), sig(max_seqlen_q=1, rows=2, paged=True, page_size=16, max_seqlen_k=32768)):
        r = decide.decide(s, device, allow)
        assert {x.arch for x in r.specs} == {arch}
        assert all(getattr(x, "mainloop", "sm80") == "sm80" for x in r.specs)
        assert all(x.smem_bytes() <= heuristics.SMEM_LIMIT[arch] for x in r.specs if hasattr(x, "smem_bytes"))
    with pytest.raises(ValueError, match="needs a Hopper device"):
        decide.decide(sig(arch="sm_90a"), device, allow)
    # the same minor rule as 8.7 -> sm_86: a cubin runs on later minors of its major
    assert arch_for_capability(device.cc[0], 3, allow_untested=True) == arch
    with pytest.raises(RuntimeError, match="compute capability 11.0 is not supported"):
        arch_for_capability(11, 0, allow_untested=True)


def test_prefill_takes_the_hopper_kernel_on_an_h200_and_mma_sync_on_an_a100():
    r = decide.decide(sig(), H200)
    v = r.variants
    assert r.kind == "single" and v.attention.mainloop == "sm90a" and v.attention.arch == "sm_90a"
    assert v.attention.tile == heuristics.SM90_TILE and v.attention.sm90_opts == "pt" and v.combine is None
    assert r.specs == (v.scheduler, v.attention)
    assert [(x.role, x.grid) for x in r.launches] == [("scheduler", "one"), ("attention", "persistent")]
    assert r.workspace == WorkspaceLayout(2, False, 1, 32, 4096, 128)
    r80 = decide.decide(sig(), A100)
    assert r80.kind == "single" and r80.variants.attention.mainloop == "sm80"
    assert r80.variants.attention.arch == "sm_80"


def test_the_scheduler_plan_follows_the_device_and_the_loaded_grid():
    (p,) = decide.decide(sig(), H200).schedulers
    kv_block = 128 * (128 + 128) * 2                               # SM90_TILE's 128 keys of K and V
    assert p.base.max_kvblocks_l2 == (60 * 2 ** 20 // 6) // kv_block
    spec = decide.decide(sig(), H200).variants.attention
    p80 = decide.scheduler_plan(spec, device=A100, num_heads_q=32, num_heads_kv=8)
    assert p80.base.max_kvblocks_l2 == (40 * 2 ** 20 // 6) // kv_block    # the device's L2 sets the budget
    assert decide.scheduler_plan(spec, device=H200, num_heads_q=32, num_heads_kv=8, head_swizzle=False) \
        .base.max_kvblocks_l2 == 0
    cfg = p.config(132)
    assert (cfg.num_ctas, cfg.wave_ctas, cfg.num_heads, cfg.block_m, cfg.pack_factor) == (132, 0, 32, 128, 1)
    assert (cfg.class_min_q, cfg.class_max_q, cfg.sort, cfg.window_left) == (0, 2 ** 31 - 1, True, -1)
    assert cfg.min_share == 1                                       # a prefill's quantum is its fair share
    # a local mask: the left window trims the counted key blocks whatever the right side (a decode under
    # (128, -1) reads 129 keys: counting all 32k keys would split it six ways, a review's find)
    for right in (0, 64, -1):
        (w,) = decide.decide(sig(mask="local", window_left=128, window_right=right, max_seqlen_q=1,
                                 max_seqlen_k=32768, rows=8, batch=8, paged=True, page_size=16), H200).schedulers
        assert w.config(132).window_left == 128, right
    # a decode launched on its own: pack-GQA, finer split shares, wave-rounded split caps
    r = decide.decide(sig(max_seqlen_q=1, max_seqlen_k=32768, rows=64, batch=64, paged=True, page_size=16), H200)
    (d,) = r.schedulers
    assert r.variants.attention.tile.block_m == 16 and r.variants.attention.pack_gqa and r.combine is not None
    cfg = d.config(1056)
    assert (cfg.num_ctas, cfg.wave_ctas, cfg.num_heads, cfg.pack_factor) == (4 * 1056, 1056, 8, 4)
    assert cfg.min_share == heuristics.DECODE_MIN_SPLIT_KEYS // 16 == 16     # 256 keys of 16-key blocks
    assert cfg.max_splits == r.variants.max_splits > 1 and r.launches[-1].grid == "rows"


def test_a_mixed_batch_takes_the_hopper_fused_kernel():
    r = decide.decide(sig(**MIXED), H200)
    f = r.variants.fused
    assert r.kind == "fused" and f.hopper and f.short.tile.block_m == 8             # the keys-as-rows tile
    assert r.short_ctas == 44 == heuristics.sm90_mixed_short_ctas(132)
    assert r.specs == (r.variants.scheduler, f, r.variants.combine)
    assert [x.role for x in r.launches] == ["scheduler long", "scheduler short", "fused attention", "combine"]
    long, short = (p.config(132) for p in r.schedulers)
    assert (long.class_min_q, long.class_max_q) == (5, 2 ** 31 - 1) and (short.class_min_q, short.class_max_q) == (0, 4)
    assert short.num_ctas == 132 * f.tiles_per_step * heuristics.SPLIT_GRANULARITY["decode"] and short.wave_ctas == 0
    assert short.min_share == long.min_share == 1                    # a fused launch's classes: the fair share
    # the short class's partials by (request, token): 8 requests x 4 tokens instead of the 600 rows
    assert isinstance(r.workspace, FusedWorkspace) and r.workspace.short.request_rows == 4
    assert r.workspace.short.partial_rows == 32 and r.workspace.short.max_splits == r.variants.short_max_splits
    # the same batch on an A100: the sm_80 fused kernel, no short-first CTAs
    r80 = decide.decide(sig(**MIXED), A100)
    assert r80.kind == "fused" and not r80.variants.fused.hopper and r80.short_ctas == 0


def test_overrides_come_in_as_settings():
    assert decide.decide(sig(**MIXED), H200, Settings(short_ctas="7")).short_ctas == 7
    rows16 = decide.decide(sig(**MIXED), H200, Settings(short_rows="16")).variants.fused.short.tile
    assert rows16.block_m == 16
    # an FP8 cache: the keys-as-rows tile and a quarter of the SMs by default; the 16-row tile with the 16-bit share
    fp8 = decide.decide(sig(kv_dtype="e4m3", **MIXED), H200)
    assert fp8.variants.fused.short.tile.block_m == 8 and fp8.short_ctas == 33
    fp8_16 = decide.decide(sig(kv_dtype="e4m3", **MIXED), H200, Settings(short_rows="16"))
    assert fp8_16.variants.fused.short.tile.block_m == 16 and fp8_16.short_ctas == 44
    with pytest.raises(ValueError, match="KERNELGEN_MIXED_SHORT_CTAS must be in \\[0, 132\\], got 500"):
        decide.decide(sig(**MIXED), H200, Settings(short_ctas="500"))
    assert decide.decide(sig(), H200, Settings(arch="sm_80")).variants.attention.mainloop == "sm80"
    assert decide.decide(sig(arch="sm_90a"), H200, Settings(arch="sm_80")).variants.attention.mainloop == "sm90a"
    assert decide.decide(sig(), H200, Settings(sm90_opts="")).variants.attention.sm90_opts == ""
    with pytest.raises(ValueError, match="KERNELGEN_ARCH must be one of"):
        decide.decide(sig(), H200, Settings(arch="hopper"))


def test_wide_head_dim_v_runs_the_classes_in_turn():
    r = decide.decide(sig(head_dim=256, head_dim_v=256, **MIXED), H200)
    assert r.kind == "pair" and r.variants.long.attention.mainloop == "sm90a"
    assert r.variants.short.attention.mainloop == "sm80"
    assert [x.role for x in r.launches][:4] == ["scheduler long", "scheduler short", "attention long",
                                                "attention short"]
    long, short = (p.config(g) for p, g in zip(r.schedulers, (132, 1056)))
    assert (long.max_splits, long.forced_splits, long.wave_ctas) == (1, True, 0) and short.wave_ctas == 1056
    assert short.min_share == 16 and long.min_share == 1


def test_a_one_shot_chunked_prefill_prefers_hopper_a_plan_the_fused_kernel():
    chunked = dict(MIXED, rows=4096, batch=4)           # 1024 query tokens a request on average
    assert decide.decide(sig(**chunked), H200).kind == "single"
    assert decide.decide(sig(**chunked, plan=True), H200).kind == "fused"
    assert decide.decide(sig(**chunked, short_query_tokens=0), H200).kind == "single"


def test_errors_name_the_cause():
    with pytest.raises(ValueError, match="needs a Hopper device"):
        decide.decide(sig(arch="sm_90a"), A100)
    with pytest.raises(ValueError, match="runs no fused mixed-batch launch"):
        decide.decide(sig(arch="sm_90a", short_query_tokens=4, **MIXED), H200)
    with pytest.raises(RuntimeError, match="not supported"):
        decide.decide(sig(), Device("V100", (7, 0), 80, 6 * 2 ** 20))
    with pytest.raises(ValueError, match="a 'single' recipe takes Variants"):
        Recipe("single", decide.decide(sig(**MIXED), H200).variants, (None,), None)


def test_the_decider_needs_no_cuda():
    """Importing and running the decider loads neither CuPy nor a CUDA context."""
    code = ("import sys; from kernelgen.kernels.device import Device; from kernelgen.selection import decide; "
            "s = decide.CallSignature('bf16', 128, 128, 32, 8, 'causal', -1, 'soa', 2048, 2048, False, 0, False, "
            "None, 0, None, None, True, 2, 4096); "
            "r = decide.decide(s, Device('H200', (9, 0), 132, 62914560)); "
            "assert r.kind == 'single' and 'cupy' not in sys.modules, sorted(m for m in sys.modules if 'cupy' in m)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_a_recipe_is_a_value():
    a, b = decide.decide(sig(**MIXED), H200), decide.decide(sig(**MIXED), H200)
    assert a == b and hash(a) == hash(b)
    assert dataclasses.replace(a, short_ctas=7) != a


@pytest.mark.parametrize("hq, hkv, batch", [(32, 8, 32), (28, 4, 32), (16, 8, 32), (8, 1, 32), (32, 8, 128)])
def test_decode_on_hopper_chooses_what_a_call_forced_to_sm80_chooses(hq, hkv, batch):
    """Paged decode on an H200 runs the sm_80 decode tile whether the call names arch="sm_80" or
    not: the same recipe, kernel for kernel (the bench's kernelgen_sm80 column on the 32-request
    decodes, 0.89-0.94x of the entry's time in the report of fc5aca9, measured the same kernels
    after the entry's first, slower measurement: bench.measure's WARMUP_MS)."""
    s = dict(num_heads_q=hq, num_heads_kv=hkv, max_seqlen_q=1, rows=batch, batch=batch, paged=True,
             page_size=16, max_seqlen_k=20000)
    auto, forced = decide.decide(sig(**s), H200), decide.decide(sig(**s, arch="sm_80"), H200)
    assert auto == forced and auto.variants.attention.mainloop == "sm80"


#: gpt-oss's window-128 layers: 64 / 8 heads, d 64, window_size (127, 0) with causal, paged decode
GPT_OSS_W128 = dict(head_dim=64, head_dim_v=64, num_heads_q=64, num_heads_kv=8, mask="local", window_left=127,
                    window_right=0, max_seqlen_q=1, max_seqlen_k=120633, paged=True, page_size=16, batch=128,
                    rows=128, sinks=True)


def test_a_window_that_shows_fewer_than_256_keys_takes_no_automatic_split():
    """heuristics.MIN_SPLIT_KEYS: the window-128 decode runs unsplit (no combine: 31 us against 60 us
    on the H200); a forced num_splits is kept; a 256-key window and no window split as before."""
    auto = decide.decide(sig(**GPT_OSS_W128), H200)
    assert auto.variants.max_splits == 1 and auto.variants.combine is None
    assert "_split" not in auto.variants.attention.name and "_local" in auto.variants.attention.name
    one = decide.decide(sig(**GPT_OSS_W128, num_splits=1), H200)       # what the bench's splits1 ran
    assert auto.variants.attention == one.variants.attention and auto.workspace == one.workspace
    forced = decide.decide(sig(**GPT_OSS_W128, num_splits=3), H200)
    assert forced.variants.max_splits == 3 and forced.variants.combine is not None
    wide = decide.decide(sig(**{**GPT_OSS_W128, "window_left": 255}), H200)
    unbounded = decide.decide(sig(**{**GPT_OSS_W128, "mask": "causal", "window_left": -1}), H200)
    assert wide.variants.max_splits == unbounded.variants.max_splits > 1
    # a right window counts: left 100 + right 200 + 1 query token = 301 keys, so the bound stays
    both = decide.decide(sig(**{**GPT_OSS_W128, "window_left": 100, "window_right": 200}), H200)
    assert both.variants.max_splits > 1
    # a left window with an unbounded right side bounds nothing
    open_right = decide.decide(sig(**{**GPT_OSS_W128, "window_right": -1}), H200)
    assert open_right.variants.max_splits > 1
    assert decide.window_span(sig(**GPT_OSS_W128)) == 127
    assert decide.window_span(sig(**{**GPT_OSS_W128, "window_right": -1})) == -1


def test_a_mixed_window_128_batch_keeps_its_decodes_whole():
    """The same rule for the short class of a mixed batch (the Hopper fused kernel's decode tiles):
    128 + 4 query tokens of the short class see at most 131 keys."""
    mixed = dict(GPT_OSS_W128, max_seqlen_q=2048, batch=64, rows=4000)
    r = decide.decide(sig(**mixed), H200)
    assert r.kind == "fused" and r.variants.short_max_splits == 1 and r.variants.combine is None
    assert "_split" not in r.variants.fused.name
    r = decide.decide(sig(**{**mixed, "mask": "causal", "window_left": -1, "window_right": -1}), H200)
    assert r.kind == "fused" and r.variants.short_max_splits > 1


def test_the_call_and_the_plan_carry_the_right_window():
    """window_size=(left, right) reaches CallSignature.window_right (0 with causal)."""
    from kernelgen.selection import arguments
    kw = dict(capacity=8, max_total_q=8, num_heads_q=8, num_heads_kv=2, head_dim=64, head_dim_v=64,
              dtype=__import__("torch").bfloat16, max_seqlen_q=1, max_seqlen_k=4096, paged=True, page_size=16,
              softcap=0.0, num_splits=0, pack_gqa=None, metadata_layout="soa", sort=True, head_swizzle=True,
              short_query_tokens=None, arch=None)
    assert arguments.plan_options(causal=True, window_size=(127, -1), **kw).signature.window_right == 0
    assert arguments.plan_options(causal=False, window_size=(127, 30), **kw).signature.window_right == 30
    assert arguments.plan_options(causal=False, window_size=(127, -1), **kw).signature.window_right == -1


#: A 128-request paged decode at 20k keys (Llama 3 heads): the automatic bound splits it.
DECODE_20K = dict(max_seqlen_q=1, rows=128, batch=128, paged=True, page_size=16, max_seqlen_k=20000)


@pytest.mark.parametrize("device", [H200, A100], ids=["h200", "a100"])
def test_max_num_splits_caps_the_automatic_bound_and_never_raises_it(device):
    """``max_num_splits`` (FA3's varlen num_splits, an upper bound): the automatic bound becomes
    min(bound, cap), still automatic (the GPU scheduler decides per request), the workspace sized for
    the cap; a cap above the bound changes nothing; a cap of 1 runs unsplit, the recipe of num_splits=1."""
    auto = decide.decide(sig(**DECODE_20K), device)
    bound = auto.variants.max_splits
    assert bound > 4 and not auto.variants.forced_splits
    capped = decide.decide(sig(**DECODE_20K, max_num_splits=4), device)
    assert capped.variants.max_splits == 4 and not capped.variants.forced_splits
    assert capped.variants.attention == auto.variants.attention and capped.variants.combine is not None
    assert capped.workspace.max_splits == 4 < auto.workspace.max_splits
    assert capped.schedulers[0].config(1056).max_splits == 4
    assert capped.schedulers[0].config(1056).forced_splits is False
    # forced 4 is another recipe: every request cut into 4 (the scheduler's forced_splits)
    forced = decide.decide(sig(**DECODE_20K, num_splits=4), device)
    assert forced.variants.forced_splits and forced != capped
    assert decide.decide(sig(**DECODE_20K, max_num_splits=bound + 1), device) == auto
    one = decide.decide(sig(**DECODE_20K, max_num_splits=1), device)
    unsplit = decide.decide(sig(**DECODE_20K, num_splits=1), device)
    assert one.variants.attention == unsplit.variants.attention and one.workspace == unsplit.workspace
    assert one.variants.max_splits == 1 and one.variants.combine is None and not one.variants.attention.split


def test_max_num_splits_caps_the_short_class_of_mixed_batches():
    """The fused launch (and the classes in turn) keep their kind under a cap; the short class's
    automatic bound is capped (a forced num_splits would have turned the fused launch off)."""
    fused = decide.decide(sig(**MIXED), H200)
    assert fused.kind == "fused" and fused.variants.short_max_splits > 2
    capped = decide.decide(sig(**MIXED, max_num_splits=2), H200)
    assert capped.kind == "fused" and capped.variants.short_max_splits == 2
    assert capped.workspace.short.max_splits == 2 and capped.schedulers[1].config(132).max_splits == 2
    assert capped.variants.fused == fused.variants.fused
    assert decide.decide(sig(**MIXED, num_splits=2), H200).kind == "single"
    pair = decide.decide(sig(head_dim=256, head_dim_v=256, **MIXED), H200)
    assert pair.kind == "pair" and pair.variants.short.max_splits > 3
    cpair = decide.decide(sig(head_dim=256, head_dim_v=256, **MIXED, max_num_splits=3), H200)
    assert cpair.kind == "pair" and cpair.variants.short.max_splits == 3
    assert cpair.variants.long == pair.variants.long
    assert cpair.schedulers[1].config(1056).max_splits == 3
    # a cap of 1: the short class unsplit (its kernels chosen so: no row_splits, no combine, no partials)
    for hd in (128, 256):
        one = decide.decide(sig(head_dim=hd, head_dim_v=hd, **MIXED, max_num_splits=1), H200)
        whole = decide.decide(sig(head_dim=hd, head_dim_v=hd, **{**MIXED, "max_seqlen_k": 64}), H200)
        assert one.kind == whole.kind == ("fused" if hd == 128 else "pair")
        assert one.combine is None and "combine" not in [x.role for x in one.launches]
        if hd == 128:
            assert one.variants.short_max_splits == 1 and not one.variants.fused.short.split
            assert not one.variants.fused.long.row_splits and one.variants.fused == whole.variants.fused
        else:
            assert one.variants.short.max_splits == 1 and not one.variants.short.attention.split
            assert not one.variants.long.attention.row_splits
    one80 = decide.decide(sig(**MIXED, max_num_splits=1), A100)
    assert one80.kind == "fused" and one80.combine is None and not one80.variants.fused.short.split


def test_max_num_splits_reaches_the_signature_and_is_checked():
    """The call's and the plan's signatures carry the cap; bad values and a cap beside a forced
    num_splits raise errors naming the argument."""
    import torch

    from kernelgen.selection import arguments, validation

    assert validation.max_num_splits(16) == 16 and validation.max_num_splits(0, 8) == 0
    for bad, err in (("3", TypeError), (True, TypeError), (2.0, TypeError), (None, TypeError), (-1, ValueError),
                     (257, ValueError)):
        with pytest.raises(err, match="max_num_splits"):
            validation.max_num_splits(bad)
    with pytest.raises(ValueError, match=r"num_splits=2 forces .* max_num_splits=8 caps .* give one"):
        validation.max_num_splits(8, 2)
    plan = arguments.plan_options(capacity=8, max_total_q=8, num_heads_q=32, num_heads_kv=8, head_dim=128,
                                  head_dim_v=128, dtype=torch.bfloat16, max_seqlen_q=1, max_seqlen_k=8192, paged=True,
                                  page_size=16, causal=True, window_size=(-1, -1), softcap=0.0, num_splits=0,
                                  pack_gqa=None, metadata_layout="soa", sort=True, head_swizzle=True,
                                  short_query_tokens=None, arch=None, max_num_splits=16)
    assert plan.signature.max_num_splits == 16
    with pytest.raises(ValueError, match="max_num_splits"):
        arguments.plan_options(capacity=8, max_total_q=8, num_heads_q=32, num_heads_kv=8, head_dim=128,
                               head_dim_v=128, dtype=torch.bfloat16, max_seqlen_q=1, max_seqlen_k=8192, paged=True,
                               page_size=16, causal=True, window_size=(-1, -1), softcap=0.0, num_splits=4,
                               pack_gqa=None, metadata_layout="soa", sort=True, head_swizzle=True,
                               short_query_tokens=None, arch=None, max_num_splits=16)


def test_fa3_num_splits_reaches_the_decision_as_a_cap(fake_cuda, monkeypatch):
    """vLLM's full-CUDA-graph decode (``num_splits=16`` on every call) through kernelgen.compat, down
    to the recipe: the signature carries max_num_splits 16, the scheduler's bound is at most 16 and
    automatic; kernelgen.varlen_attention(max_num_splits=...) the same; num_splits=1 no split."""
    import torch

    from kernelgen import compat

    seen = []
    real = decide.decide

    def spy(signature, device, settings=Settings()):
        r = real(signature, device, settings)
        seen.append((signature, r))
        return r

    monkeypatch.setattr(decide, "decide", spy)
    batch, ctx, ps = 64, 20000, 16
    pages = -(-ctx // ps)
    q = torch.randn(batch, 1, 32, 128).to(torch.bfloat16)
    kc = torch.zeros(batch * pages, ps, 8, 128, dtype=torch.bfloat16)
    pt = torch.arange(batch * pages, dtype=torch.int32).view(batch, pages)
    used = torch.full((batch,), ctx, dtype=torch.int32)
    compat.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=used, page_table=pt, causal=True)
    auto = seen[-1][1]
    assert seen[-1][0].max_num_splits == 0 and auto.variants.max_splits > 16
    compat.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=used, page_table=pt, causal=True, num_splits=16)
    s, r = seen[-1]
    assert (s.num_splits, s.max_num_splits) == (0, 16)
    assert r.variants.max_splits == 16 and not r.variants.forced_splits and r.workspace.max_splits == 16
    assert r.variants.attention == auto.variants.attention
    q3, cu = q.view(batch, 32, 128), torch.arange(batch + 1, dtype=torch.int32)
    kernelgen_call = __import__("kernelgen").varlen_attention
    kernelgen_call(q3, kc, kc, cu, None, 1, ctx, seqused_k=used, page_table=pt, causal=True, max_num_splits=5)
    assert seen[-1][0].max_num_splits == 5 and seen[-1][1].variants.max_splits == 5
    compat.flash_attn_with_kvcache(q, kc, kc, cache_seqlens=used, page_table=pt, causal=True, num_splits=1)
    assert seen[-1][1].variants.max_splits == 1 and seen[-1][1].variants.combine is None
    with pytest.raises(ValueError, match="max_num_splits"):
        kernelgen_call(q3, kc, kc, cu, None, 1, ctx, seqused_k=used, page_table=pt, num_splits=2, max_num_splits=5)
