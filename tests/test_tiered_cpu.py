"""The tiered first call of a new user variant (issue 25; ``selection.tiered``, ``jit.background``)
on the CPU, through tests/fake_cuda.py on its fake H200.

Every kernel a call loads goes through the kernel cache here (the fake loader behind a real
``KernelCache.get``, as ``benchmarks/experiments/variant_first_call_split.py --fake-cuda`` does),
with ``compiler.compile_cubin`` replaced by a stand-in that returns a dummy cubin at once, except
for a user variant's Hopper kernel (``_wgmma`` and ``_var`` in its name), whose compile waits on a
``threading.Event`` the test sets (``Builds.gate``): which recipe a call runs never depends on
timing.  Covered: the first call runs the sm_80 recipe and starts one build; a call while it runs
takes the sm_80 recipe again with no new build and no compile; after it the Hopper recipe, kept
per signature; the synchronous cases (``KERNELGEN_TIERED_COMPILE`` off, a forced arch, graph
capture, JIT disabled, a kernel already in the disk cache, ``AttentionPlan``); a failed build
surfacing at the next call; a snippet that does not compile; the pair recipe's long class; at
head dim 64 the three-warpgroup kernel's two-warpgroup twin, built after it and taken where it
spills less (test_d64_twin; a plain call and a plan agree on it);
``wait_for_compiles``' names and timeout; a foreground ``get`` of a kernel being built waits for
it; interpreter exit waits for a build; a forked child starts with none.
"""
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

import fake_cuda as FC
from test_fused_cpu import CTX, QLENS, paged_inputs

import kernelgen
from kernelgen.front import api
from kernelgen.jit import background, cache, compiler, runtime
from kernelgen.selection import tiered
from kernelgen.selection.settings import Settings

BF16 = torch.bfloat16
SM80 = ["scheduler", "attention_variant0"]
HOPPER = ["scheduler", "attention_sm90_variant0"]
ROOT = Path(__file__).resolve().parent.parent


def _is_hopper_variant(name: str) -> bool:
    return "_wgmma" in name and "_var" in name


class Builds:
    """The compile stand-in's state: ``gate`` (the Hopper variant kernel's compile waits for it; a
    test of a synchronous build opens it first),
    ``started`` (set when such a compile starts waiting), ``names`` (every compile, in order),
    ``fail`` (a predicate on the kernel name: those compiles raise CompileError once through the gate)."""

    def __init__(self):
        self.gate = threading.Event()
        self.started = threading.Event()
        self.names = []
        self.fail = lambda name: False

    def compile_cubin(self, source, arch, options, name="kernel"):
        self.names.append(name)
        if _is_hopper_variant(name):
            self.started.set()
            assert self.gate.wait(60), "the test never opened the gate"
        if self.fail(name):
            raise compiler.CompileError(name, f"{name}.cu(1): error: identifier \"nope\" is undefined", None)
        return compiler.CompileResult(cubin=b"fake cubin of " + name.encode(), log="", resources={"registers": 128})


@pytest.fixture
def builds(fake_cuda, monkeypatch, tmp_path):
    b = Builds()
    monkeypatch.setenv("KERNELGEN_CACHE_DIR", str(tmp_path / "cache"))
    cache.set_cache_dir(tmp_path / "cache")
    monkeypatch.setattr(compiler, "compile_cubin", b.compile_cubin)
    fake_load = runtime._load

    def load(spec, ordinal):            # the kernel from the cache (compiled on a miss), then "loaded"
        cache.get_cache().get(spec)
        return fake_load(spec, ordinal)

    monkeypatch.setattr(runtime, "_load", load)
    yield b
    b.gate.set()                        # (conftest then waits for the builds still running)


def _inputs():
    """Two causal requests of 128 tokens (4 query heads, 2 KV heads, d 128): the fake H200's
    dispatcher takes the Hopper kernel for them, with or without a variant (on one tile: at d 64
    a variant's three-warpgroup kernel has a two-warpgroup twin, built after it: test_d64_twin)."""
    torch.manual_seed(0)
    q = torch.randn(256, 4, 128).to(BF16)
    k = torch.randn(256, 2, 128).to(BF16)
    return q, k, torch.randn_like(k), torch.tensor([0, 128, 256], dtype=torch.int32)


def _call(inputs, **kw):
    q, k, v, cu = inputs
    return kernelgen.varlen_attention(q, k, v, cu, cu, 128, 128, causal=True, **kw)


def _warm(fake_cuda, inputs):
    """A plain call of the shape first (its scheduler, which the variant's recipes share, loaded),
    as in a serving process; the recorder cleared."""
    _call(inputs)
    fake_cuda.clear()


def _variant():
    return kernelgen.Variant(score_mod="score * 0.5f")


def test_first_call_runs_sm80_while_the_hopper_kernel_builds(fake_cuda, builds, monkeypatch):
    x = _inputs()
    _warm(fake_cuda, x)
    var, kept = _variant(), len(api._CALLS)
    _call(x, variant=var)
    assert fake_cuda.kinds() == SM80
    (spec,) = [x for _, x in background._futures]                 # one build: the variant's Hopper kernel
    assert tiered.is_slow(spec) and spec.variant == var.code and background.state(spec) == "pending"
    assert builds.started.wait(60)
    assert len(api._CALLS) == kept                # the provisional prepared call is not kept
    compiled = list(builds.names)
    built = sorted(n for n in compiled if "_var" in n)   # the sm_80 kernel in the foreground, the Hopper one behind
    assert len(built) == 2 and spec.name in built and not _is_hopper_variant(built[1 - built.index(spec.name)])
    for _ in range(2):                            # while the build runs: the sm_80 recipe, nothing new built
        fake_cuda.clear()
        _call(x, variant=var)
        assert fake_cuda.kinds() == SM80
    assert builds.names == compiled and [x for _, x in background._futures] == [spec]
    builds.gate.set()
    assert kernelgen.wait_for_compiles() == [spec.name]
    assert background.state(spec) == "built"
    fake_cuda.clear()
    _call(x, variant=var)                         # the Hopper recipe, kept per signature
    assert fake_cuda.kinds() == HOPPER and len(api._CALLS) == kept + 1
    assert any(k.spec == spec for k in runtime.loaded_kernels())
    monkeypatch.setattr(api, "_validated_call", lambda *a, **kw: pytest.fail("the kept call was not used"))
    fake_cuda.clear()
    _call(x, variant=var)
    assert fake_cuda.kinds() == HOPPER
    assert builds.names.count(spec.name) == 1 and [x for _, x in background._futures] == [spec]


def _spilling(builds, monkeypatch, spilled):
    """The compile stand-in with spills: ``spilled`` True, the three-warpgroup variant kernel spills
    64 bytes; "twin_worse", and its two-warpgroup twin 512."""
    compile_real = builds.compile_cubin

    def compile_cubin(source, arch, options, name="kernel"):
        r = compile_real(source, arch, options, name)
        n = (64 if "w12" in name else 512 if spilled == "twin_worse" and _is_hopper_variant(name) else 0) if spilled \
            else 0
        if n:
            r = compiler.CompileResult(cubin=r.cubin, log="", resources={"registers": 168, "spill_stores": n})
        return r
    monkeypatch.setattr(compiler, "compile_cubin", compile_cubin)


@pytest.mark.parametrize("spilled", [False, True, "twin_worse"])
def test_d64_twin(fake_cuda, builds, monkeypatch, spilled):
    """Head dim 64: the variant's Hopper kernel is the three-warpgroup one, which may spill
    (selection.spills); the first call's background build makes it and then its two-warpgroup
    twin, so that after wait_for_compiles the next call runs, and keeps, the Hopper kernel the
    build's spills choose: three warpgroups without spills, two with, three again where the twin
    spills more (no second round of provisional sm_80 calls and background builds)."""
    _spilling(builds, monkeypatch, spilled)
    torch.manual_seed(0)
    x = (torch.randn(256, 4, 64).to(BF16), *(torch.randn(256, 2, 64).to(BF16) for _ in range(2)),
         torch.tensor([0, 128, 256], dtype=torch.int32))
    _warm(fake_cuda, x)
    var, kept = _variant(), len(api._CALLS)
    _call(x, variant=var)
    assert fake_cuda.kinds() == SM80
    specs = [sp for _, sp in background._futures]
    assert [sp.tile.num_warps for sp in specs if tiered.is_slow(sp)] == [12, 8]   # the twin after it
    builds.gate.set()
    names = kernelgen.wait_for_compiles()
    assert [n for n in names if _is_hopper_variant(n)] == [sp.name for sp in specs if tiered.is_slow(sp)]
    compiled = list(builds.names)
    fake_cuda.clear()
    _call(x, variant=var)                         # the Hopper recipe at once, kept
    assert fake_cuda.kinds() == HOPPER and len(api._CALLS) == kept + 1
    ran = [k.spec for k in runtime.loaded_kernels() if tiered.is_slow(k.spec)]
    assert [sp.tile.num_warps for sp in ran] == [8 if spilled is True else 12]
    assert builds.names == compiled and len(background._futures) == len(specs)   # nothing built again


@pytest.mark.parametrize("spilled", [True, "twin_worse"])
def test_a_plain_call_and_a_plan_take_the_same_twin(fake_cuda, builds, monkeypatch, spilled):
    """Both kernels in the disk cache (``kernelgen warmup --variant``, or an earlier process) and
    their spills not yet known in this process: a plain call decides from the build's spills as an
    AttentionPlan does (the kernel that spills less), whichever comes first."""
    from kernelgen.selection import spills
    _spilling(builds, monkeypatch, spilled)
    builds.gate.set()
    monkeypatch.setenv("KERNELGEN_TIERED_COMPILE", "0")
    torch.manual_seed(0)
    x = (torch.randn(256, 4, 64).to(BF16), *(torch.randn(256, 2, 64).to(BF16) for _ in range(2)),
         torch.tensor([0, 128, 256], dtype=torch.int32))
    _warm(fake_cuda, x)
    var = _variant()
    plan = FC.make_plan(monkeypatch, max_batch=2, num_heads_q=4, num_heads_kv=2, head_dim=64, max_total_q=256,
                        max_seqlen_q=128, max_seqlen_k=128, causal=True, variant=var)
    want = 8 if spilled is True else 12
    assert plan.recipe.variants.attention.tile.num_warps == want
    spills._KNOWN.clear()                         # a new process: the disk cache warm, nothing known
    _call(x, variant=var)
    ran = [k.spec for k in runtime.loaded_kernels() if tiered.is_slow(k.spec)]
    assert ran and ran[-1].tile.num_warps == want


@pytest.mark.parametrize("value, on", [("0", False), ("false", False), ("No", False), ("OFF", False), (" off ", False),
                                       ("1", True), ("", True), ("yes", True)])
def test_the_switch_is_read_through_settings(value, on):
    assert Settings.from_env({"KERNELGEN_TIERED_COMPILE": value}).tiered_compile is on
    assert Settings.from_env({}).tiered_compile


def _synchronous_hopper(fake_cuda, builds, x):
    builds.gate.set()                             # (a synchronous build waits for nothing)
    _call(x, variant=_variant())
    assert fake_cuda.kinds() == HOPPER and background._futures == {}


def test_switched_off_the_first_call_builds_the_hopper_kernel(fake_cuda, builds, monkeypatch):
    x = _inputs()
    _warm(fake_cuda, x)
    monkeypatch.setenv("KERNELGEN_TIERED_COMPILE", "0")
    _synchronous_hopper(fake_cuda, builds, x)


@pytest.mark.parametrize("arch, env, kinds", [("sm_90a", None, HOPPER), ("sm_80", None, SM80),
                                              (None, "sm_90a", HOPPER), (None, "sm_80", SM80)])
def test_a_forced_arch_is_honoured_synchronously(fake_cuda, builds, monkeypatch, arch, env, kinds):
    x = _inputs()
    _warm(fake_cuda, x)
    if env:
        monkeypatch.setenv("KERNELGEN_ARCH", env)
    builds.gate.set()
    _call(x, variant=_variant(), arch=arch)
    assert fake_cuda.kinds() == kinds and background._futures == {}


def test_auto_is_not_forced(fake_cuda, builds):
    x = _inputs()
    _warm(fake_cuda, x)
    _call(x, variant=_variant(), arch="auto")
    assert fake_cuda.kinds() == SM80 and len(background._futures) == 1


def test_under_graph_capture_the_first_call_builds_the_hopper_kernel(fake_cuda, builds, monkeypatch):
    x = _inputs()
    _warm(fake_cuda, x)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    _synchronous_hopper(fake_cuda, builds, x)


def test_with_jit_disabled_the_call_names_the_missing_kernel(fake_cuda, builds, monkeypatch):
    x = _inputs()
    _warm(fake_cuda, x)
    monkeypatch.setenv("KERNELGEN_DISABLE_JIT", "1")
    with pytest.raises(kernelgen.KernelNotCachedError, match="_wgmma.*_var|_var.*_wgmma"):
        _call(x, variant=_variant())
    assert background._futures == {}


def test_a_kernel_in_the_disk_cache_runs_at_once(fake_cuda, builds, monkeypatch):
    """A later process (nothing loaded, the cache's memory empty, no build known): the Hopper
    kernel the earlier one published is read from disk, and the first call runs it."""
    x = _inputs()
    _warm(fake_cuda, x)
    var = _variant()
    _call(x, variant=var)
    builds.gate.set()
    (name,) = kernelgen.wait_for_compiles()
    monkeypatch.setattr(runtime, "_loaded", {})
    monkeypatch.setattr(api, "_CALLS", type(api._CALLS)())
    monkeypatch.setattr(background, "_futures", {})
    cache.set_cache_dir(cache.get_cache().root)
    fake_cuda.clear()
    n = len(builds.names)
    _call(x, variant=var)
    assert fake_cuda.kinds() == HOPPER and background._futures == {}
    assert builds.names[n:] == []                 # loaded from disk: nothing compiled


def test_a_plan_builds_its_kernels_synchronously(fake_cuda, builds, monkeypatch):
    var = _variant()
    builds.gate.set()
    plan = FC.make_plan(monkeypatch, max_batch=2, num_heads_q=4, num_heads_kv=2, head_dim=128, dtype=BF16,
                        max_total_q=256, max_seqlen_q=128, max_seqlen_k=128, causal=True, variant=var)
    (slow,) = tiered.slow_specs(plan.recipe)
    assert slow.variant == var.code and background._futures == {}
    assert builds.names.count(slow.name) == 1


def test_a_foreground_build_of_a_kernel_being_built_waits_for_it(fake_cuda, builds):
    """An AttentionPlan (or a call on the synchronous path) needing a kernel the background is
    building waits on the cache's key lock and takes that build's result: one compile."""
    x = _inputs()
    _warm(fake_cuda, x)
    _call(x, variant=_variant())
    (spec,) = [x for _, x in background._futures]
    got = []
    t = threading.Thread(target=lambda: got.append(cache.get_cache().get(spec)))
    t.start()
    builds.gate.set()
    t.join(60)
    assert kernelgen.wait_for_compiles() == [spec.name]
    assert got and got[0].cubin == next(f for (_, x), f in background._futures.items() if x == spec).result().cubin
    assert builds.names.count(spec.name) == 1


def test_a_failed_build_raises_at_the_next_call(fake_cuda, builds):
    x = _inputs()
    _warm(fake_cuda, x)
    builds.fail = _is_hopper_variant
    var = _variant()
    _call(x, variant=var)
    assert fake_cuda.kinds() == SM80
    builds.gate.set()
    assert kernelgen.wait_for_compiles() == []     # a failed build is not listed
    (spec,) = [x for _, x in background._futures]
    assert background.state(spec) == "failed"
    for _ in range(2):                              # the synchronous path: built again, the error raised
        with pytest.raises(kernelgen.VariantCompileError, match="nope"):
            _call(x, variant=var)
    assert builds.names.count(spec.name) == 3 and [x for _, x in background._futures] == [spec]


def test_a_snippet_that_does_not_compile_raises_at_the_first_call(fake_cuda, builds):
    x = _inputs()
    _warm(fake_cuda, x)
    builds.fail = lambda name: "_var" in name
    builds.gate.set()
    with pytest.raises(kernelgen.VariantCompileError, match="nope"):   # from the foreground sm_80 compile
        _call(x, variant=_variant())
    assert kernelgen.wait_for_compiles() == []


def test_a_mixed_batch_runs_one_sm80_class_while_the_long_class_builds(fake_cuda, builds):
    """The pair recipe (the classes in turn: the long class on the Hopper kernel): its long class's
    kernel is the slow one; the first call runs the batch as one sm_80 class."""
    q, kc, vc, cu_q, used, pt = paged_inputs(QLENS, CTX)
    var = kernelgen.Variant(mask_mod="kv_idx >= 0")

    def call():
        fake_cuda.clear()
        kernelgen.varlen_attention(q, kc, vc, cu_q, None, max(QLENS), max(CTX), seqused_k=used, page_table=pt,
                                   variant=var)
        return fake_cuda.kinds()

    kinds = call()
    assert kinds[:2] == ["scheduler", "attention_variant0"] and not any("sm90" in x for x in kinds)
    first = next(iter(background._futures))[1]
    assert tiered.is_slow(first)
    builds.gate.set()
    assert kernelgen.wait_for_compiles()[0] == first.name
    assert call()[:4] == ["scheduler", "scheduler", "attention_sm90_variant0", "attention_variant0"]


def test_wait_for_compiles_returns_names_once_and_honours_the_timeout(fake_cuda, builds):
    assert kernelgen.wait_for_compiles() == []
    x = _inputs()
    _warm(fake_cuda, x)
    _call(x, variant=_variant())
    (spec,) = [x for _, x in background._futures]
    with pytest.raises(TimeoutError, match=spec.name):
        kernelgen.wait_for_compiles(timeout=0.01)
    assert background.state(spec) == "pending"
    builds.gate.set()
    assert kernelgen.wait_for_compiles(timeout=60) == [spec.name]
    assert kernelgen.wait_for_compiles() == []      # each build returned once
    assert "wait_for_compiles" in kernelgen.__all__ and kernelgen.wait_for_compiles is background.wait_for_compiles


def test_submit_dedupes_per_spec(fake_cuda, builds):
    x = _inputs()
    _warm(fake_cuda, x)
    _call(x, variant=_variant())
    (spec,) = [x for _, x in background._futures]
    f = next(f for (_, x), f in background._futures.items() if x == spec)
    done = []
    threads = [threading.Thread(target=lambda: done.append(background.submit([spec]))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(fs == [f] for fs in done) and len(done) == 4
    builds.gate.set()
    assert kernelgen.wait_for_compiles() == [spec.name] and builds.names.count(spec.name) == 1


def test_interpreter_exit_waits_for_a_build(tmp_path):
    """A process that ends while a build runs: the build finishes first and publishes a whole
    entry (the interpreter joins the worker before it shuts down); no temp file is left."""
    script = textwrap.dedent("""
        import sys, time
        from kernelgen.jit import background, cache, compiler
        from kernelgen.kernels.variant_code import VariantCode
        from kernelgen.selection import heuristics

        spec = heuristics.choose("sm_90a", "bf16", 128, 128, num_heads_q=4, num_heads_kv=2, mask="causal",
                                 max_seqlen_q=128, max_seqlen_k=128,
                                 variant=VariantCode(score_mod="score * 0.25f")).attention

        def slow(source, arch, options, name="kernel"):
            time.sleep(0.5)     # still compiling when the main thread ends
            return compiler.CompileResult(cubin=b"fake cubin", log="", resources={})

        compiler.compile_cubin = slow
        background.submit([spec], cache.KernelCache(sys.argv[1]))
        print(spec.name)
    """)
    root = tmp_path / "c"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-c", script, str(root)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    name = res.stdout.strip()
    kc = cache.KernelCache(root)
    assert [e["name"] for e in kc.entries() if e["valid"]] == [name]
    assert kc.verify() == {"ok": 1, "bad": [], "repaired": 0, "orphans_removed": 0, "orphans": [], "temps": []}
    assert not list(root.glob("*.tmp"))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_without_builds(fake_cuda, builds):
    x = _inputs()
    _warm(fake_cuda, x)
    _call(x, variant=_variant())
    (spec,) = [x for _, x in background._futures]
    assert builds.started.wait(60)                 # the worker holds the entry's key lock now
    key = cache.get_cache()._derive(spec)[2]
    pid = os.fork()
    if pid == 0:   # the child: no builds, every cache lock free
        ok = background._futures == {} and background.state(spec) is None \
            and cache.get_cache()._key_lock(key).acquire(blocking=False)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    builds.gate.set()
    assert os.waitstatus_to_exitcode(status) == 0
    assert kernelgen.wait_for_compiles() == [spec.name]


def test_only_quick_kernels_missing_take_the_synchronous_path(fake_cuda, builds, monkeypatch):
    """The variant's Hopper kernel is in the disk cache but the scheduler is not (a later process,
    the scheduler's entry gone): the call builds the scheduler and runs the Hopper kernel, not the
    sm_80 recipe (whose variant kernel it would compile, the slower build, for nothing)."""
    x = _inputs()
    var = _variant()
    builds.gate.set()
    _call(x, variant=var, arch="sm_90a")          # synchronous: the Hopper kernel and the scheduler on disk
    monkeypatch.setattr(runtime, "_loaded", {})
    monkeypatch.setattr(api, "_CALLS", type(api._CALLS)())
    root = cache.get_cache().root
    for p in root.iterdir():
        if p.name.startswith("sched"):
            p.unlink()
    cache.set_cache_dir(root)
    fake_cuda.clear()
    n = len(builds.names)
    _call(x, variant=var)
    assert fake_cuda.kinds() == HOPPER and background._futures == {}
    assert [n for n in builds.names[n:] if "_var" in n] == []    # no variant kernel compiled


def test_a_cache_directory_set_during_a_build_gets_its_own_build(fake_cuda, builds, tmp_path):
    """A build counts for the cache directory it was started in: after ``set_cache_dir`` to another
    one, the next call of the variant runs the sm_80 recipe again and builds the Hopper kernel into
    the new directory in the background (it does not compile it in the foreground), then runs it."""
    x = _inputs()
    _warm(fake_cuda, x)
    var = _variant()
    _call(x, variant=var)
    (spec,) = [s for _, s in background._futures]
    assert builds.started.wait(60)
    cache.set_cache_dir(tmp_path / "other")
    builds.gate.set()
    assert kernelgen.wait_for_compiles() == [spec.name]
    fake_cuda.clear()
    _call(x, variant=var)
    assert fake_cuda.kinds() == SM80
    assert [s for _, s in background._futures] == [spec, spec] and background.state(spec) in ("pending", "built")
    assert kernelgen.wait_for_compiles() == [spec.name]
    assert builds.names.count(spec.name) == 2
    fake_cuda.clear()
    _call(x, variant=var)
    assert fake_cuda.kinds() == HOPPER


def test_a_quick_kernel_that_does_not_build_falls_back_to_the_hopper_kernel(fake_cuda, builds):
    """The sm_80 kernel of the provisional recipe fails to compile while the Hopper one builds: the
    call takes the full recipe (waiting for the background build) instead of failing."""
    x = _inputs()
    _warm(fake_cuda, x)

    def fail(name):
        if "_var" in name and not _is_hopper_variant(name):
            builds.gate.set()          # the Hopper build may finish now
            return True
        return False

    builds.fail = fail
    out = _call(x, variant=_variant())
    assert out.shape == (256, 4, 128)
    assert fake_cuda.kinds() == HOPPER
    fake_cuda.clear()
    _call(x, variant=_variant())          # kept per signature: no decision, no new build
    assert fake_cuda.kinds() == ["scheduler", "attention_sm90_variant0"]
