"""Review of FP8 mixed batches (the Hopper fused kernel, the classes in turn, the sm_80 fused
kernel) from the CPU side: the descales reach both classes' parameter structs on every path
(varlen_attention's first, prepared and graph-launched calls; a padded plan's run, captured step and
schedule + attend), with per-request, broadcast, transposed and absent descales.  Found: the sm_80
fused kernel's schedule + attend packed its long class without the descale fields (a 608-byte
buffer for a 656-byte parameter); ``launch.launch_kernel`` now checks the size."""
import pytest
import torch

import fake_cuda as fake_cuda_mod  # noqa: F401
from test_fused_cpu import CTX, QLENS, paged_inputs, D, HKV, HQ

E4M3 = torch.float8_e4m3fn


def _descale_fields(f):
    return (f["k_descale"], f["v_descale"], f["k_descale_batch_stride"], f["k_descale_head_stride"],
            f["v_descale_batch_stride"], f["v_descale_head_stride"])


@pytest.mark.parametrize("arch", ["sm_80", None])   # None on the fake H200 without page_size: the sm_80 fused kernel
def test_sm80_fused_fp8_plan_schedule_attend_matches_run(fake_cuda, monkeypatch, arch):
    from fake_cuda import make_plan
    p = make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                  max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, kv_dtype="e4m3", arch=arch)
    assert p.recipe.kind == "fused" and not p.hopper
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    kd, vd = torch.rand(len(QLENS), HKV) + 0.5, torch.tensor(0.75)
    out = torch.empty_like(q)
    p.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, k_descale=kd, v_descale=vd)
    assert fake_cuda.kinds() == ["scheduler", "scheduler", "fused_fp8", "combine"]
    run = next(x for x in fake_cuda.launches if x.kind == "fused_fp8")
    want = (kd.data_ptr(), vd.data_ptr(), HKV, 1, 0, 0)
    f = run.fields()
    assert _descale_fields(f["long"]) == _descale_fields(f["short"]) == want
    fake_cuda.clear()
    p.schedule(cu_q, seqused_k=used)
    p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, k_descale=kd, v_descale=vd)
    att = next(x for x in fake_cuda.launches if x.kind == "fused_fp8")
    assert len(att.params) == len(run.params), (len(att.params), len(run.params))
    assert att.params == run.params


def test_sm80_fused_fp8_attend_packs_both_fp8_structs(fake_cuda, monkeypatch):
    """oneoff.attend on the sm_80 fused FP8 kernel: the packed parameter must be two
    ATTENTION_PARAMS_FP8 (the kernel's FusedParams), each with the descales."""
    from fake_cuda import make_plan
    from kernelgen.kernels.params import ATTENTION_PARAMS_FP8
    from kernelgen.launch import launch, oneoff
    sizes = []
    real = launch.launch_kernel
    monkeypatch.setattr(oneoff.launch, "launch_kernel",
                        lambda k, g, s, packed, **kw: (sizes.append((k.spec.kind, len(packed))), real(k, g, s, packed, **kw)))
    p = make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                  max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, kv_dtype="e4m3", arch="sm_80")
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    kd = torch.rand(len(QLENS), HKV) + 0.5
    p.schedule(cu_q, seqused_k=used)
    p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, k_descale=kd, v_descale=kd)
    fused = [n for kind, n in sizes if kind == "fused"]
    assert fused == [2 * ATTENTION_PARAMS_FP8.size]


def _class_descales(rec):
    out = []
    for x in rec.launches:
        if x.kind in ("fused_fp8", "fused_sm90_fp8"):
            f = x.fields()
            out += [_descale_fields(f["long"]), _descale_fields(f["short"])]
        elif x.kind.startswith("attention"):
            out.append(_descale_fields(x.fields()))
    return out


@pytest.mark.parametrize("mode", ["hopper_fused", "pair", "sm80_fused"])
@pytest.mark.parametrize("desc", ["none", "scalar", "expand", "vT", "konly"])
def test_varlen_mixed_fp8_descales_reach_both_classes(fake_cuda, monkeypatch, mode, desc):
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    B, h = len(QLENS), kc.shape[2]
    if mode == "pair":
        monkeypatch.setenv("KERNELGEN_FP8_FUSED", "0")
    arch = "sm_80" if mode == "sm80_fused" else None
    s = torch.tensor(0.5)
    kdT = (torch.rand(h, B) + 0.5).t()
    kd = torch.rand(B, h) + 0.5
    kk, vv, want = {
        "none": (None, None, (0, 0, 0, 0, 0, 0)),
        "scalar": (s, s, (s.data_ptr(), s.data_ptr(), 0, 0, 0, 0)),
        "expand": (s.expand(B, h), kd, (s.data_ptr(), kd.data_ptr(), 0, 0, h, 1)),
        "vT": (kd, kdT, (kd.data_ptr(), kdT.data_ptr(), h, 1, 1, B)),
        "konly": (kd, None, (kd.data_ptr(), 0, h, 1, 0, 0)),
    }[desc]
    for i in range(3):   # validating path, prepared call, graph launch
        fake_cuda.clear()
        kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                                   causal=True, k_descale=kk, v_descale=vv, arch=arch)
        kinds = fake_cuda.kinds()
        d = _class_descales(fake_cuda)
        assert len(d) == 2, (i, kinds)
        assert d == [want, want], (i, kinds, d)


import kernelgen  # noqa: E402


@pytest.mark.parametrize("mode", ["hopper_fused", "pair", "sm80_fused"])
def test_mixed_fp8_plan_padded_batch_run_capture_attend(fake_cuda, monkeypatch, mode):
    from fake_cuda import make_plan
    from test_fused_cpu import PS
    if mode == "pair":
        monkeypatch.setenv("KERNELGEN_FP8_FUSED", "0")
    extra = {"arch": "sm_80"} if mode == "sm80_fused" else {"page_size": PS}
    qlens, ctx = QLENS + [0] * 9, CTX + [0] * 9        # padded to the plan's 16 slots
    q, kc, vc, cu_q, used, pt = paged_inputs(qlens, ctx)
    kc, vc = kc.to(E4M3), vc.to(E4M3)
    B, h = len(qlens), kc.shape[2]
    p = make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                  max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, kv_dtype="e5m2", **extra)
    kc, vc = kc.to(torch.float8_e5m2), vc.to(torch.float8_e5m2)
    kd, vd = torch.rand(B, h) + 0.5, (torch.rand(h, B) + 0.5).t()
    want = (kd.data_ptr(), vd.data_ptr(), h, 1, 1, B)
    out = torch.empty_like(q)
    for step in range(3):
        fake_cuda.clear()
        fake_cuda.capturing = step == 2
        p.run(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, k_descale=kd, v_descale=vd)
        fake_cuda.capturing = False
        assert _class_descales(fake_cuda) == [want, want], (step, fake_cuda.kinds())
    fake_cuda.clear()
    p.schedule(cu_q, seqused_k=used)
    p.attend(q, kc, vc, cu_q, seqused_k=used, page_table=pt, out=out, k_descale=kd, v_descale=vd)
    assert _class_descales(fake_cuda) == [want, want], fake_cuda.kinds()


def test_launch_kernel_refuses_a_parameter_buffer_of_the_wrong_size(fake_cuda, monkeypatch):
    """``launch.launch_kernel`` (the one-off launches of schedule + attend) checks the buffer's size
    against the kernel's parameter: two AttnParams for the sm_80 fused kernel, one elsewhere."""
    from fake_cuda import make_plan
    from kernelgen.kernels.params import ATTENTION_PARAMS, ATTENTION_PARAMS_FP8
    from kernelgen.launch import launch
    p = make_plan(monkeypatch, max_batch=16, num_heads_q=HQ, num_heads_kv=HKV, head_dim=D, max_total_q=4096,
                  max_seqlen_q=2048, max_seqlen_k=8192, paged=True, causal=True, kv_dtype="e4m3", arch="sm_80")
    k = p.attn
    assert k.spec.kind == "fused" and k.params is ATTENTION_PARAMS_FP8
    bad = bytes(ATTENTION_PARAMS.size + ATTENTION_PARAMS_FP8.size)      # (the defect's 608 bytes)
    with pytest.raises(ValueError, match=rf"a parameter buffer of {len(bad)} bytes, the kernel takes "
                                         rf"{2 * ATTENTION_PARAMS_FP8.size}"):
        launch.launch_kernel(k, 1, 0, bad)
    assert fake_cuda.kinds() == []
