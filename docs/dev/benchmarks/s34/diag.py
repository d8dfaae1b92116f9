"""Seed 35's FP8 mismatch: repeat the batch, compare runs bitwise, dump the bad element, then vary the case."""
import sys, json, copy
sys.path.insert(0, "tools")
import torch, fuzz, kernelgen

SEED = 14176579
case = fuzz.case_for_seed(SEED)


def once(case, inp):
    hq, dv = case["num_heads_q"], case["head_dim_v"]
    out = torch.full((inp["q"].shape[0], hq, dv), float("nan"), dtype=inp["out_dtype"], device="cuda")
    fuzz.forget_prepared_call()
    with fuzz.poisoned_allocations(True):
        o, lse = kernelgen.varlen_attention(inp["q"], inp["k"], inp["v"], inp["cu_seqlens_q"], inp["cu_seqlens_k"],
                                            inp["max_seqlen_q"], inp["max_seqlen_k"], out=out, **inp["kwargs"])
    torch.cuda.synchronize()
    return o.clone(), lse.clone(), fuzz.prepared_kernel_name()


def study(case, reps, label):
    inp = fuzz.build_inputs(case)
    rows = sum(case["qlens"])
    ref, ref_lse, ob, lb = fuzz.reference_for(case, inp, fp8_mma_bounds=True)
    outs = [once(case, inp) for _ in range(reps)]
    kernel = outs[0][2]
    res = []
    for o, lse, _ in outs:
        r = fuzz.compare(case, o, lse, ref, ref_lse, rows, bounds=(ob, lb))
        res.append(r)
    diff_runs = [int((outs[0][0][:rows] != outs[i][0][:rows]).sum()) for i in range(1, reps)]
    nbad = sum(not r["ok"] for r in res)
    print(f"[{label}] kernel {kernel}; {nbad}/{reps} runs mismatch; elements differing from run 0: {diff_runs}; "
          f"ratios {[round(r.get('bound_ratio', 0), 3) for r in res]}", flush=True)
    for r in res:
        if not r["ok"]:
            print("   ", r["errors"][:2], flush=True)
    # details of every bad element of every run
    cq = inp["cu_seqlens_q"].tolist(); ck = inp["cu_seqlens_k"].tolist()
    seen = set()
    for o, lse, _ in outs:
        err = (o[:rows].double() - ref[:rows]).abs()
        bad = (err > ob[:rows]) & ~torch.isnan(o[:rows].double())
        for t, h, d in bad.nonzero()[:8].tolist():
            if (t, h, d) in seen:
                continue
            seen.add((t, h, d))
            b = max(i for i in range(len(cq) - 1) if cq[i] <= t)
            rr = t - cq[b]; lq = cq[b + 1] - cq[b]; lk = ck[b + 1] - ck[b]
            kh = h // (case["num_heads_q"] // case["num_heads_kv"])
            vdesc = inp["v_descale"][b, kh].item() if inp.get("v_descale") is not None else 1.0
            vcol = (inp["v"][ck[b]:ck[b + 1], kh, d].double() * vdesc).tolist()
            row_ratio = (err[t, h] / ob[t, h]).tolist()
            print(f"   bad t{t} h{h} d{d}: req {b} row {rr}/{lq} klen {lk} out {o[t, h, d].item():.6g} ref "
                  f"{ref[t, h, d].item():.6g} bound {ob[t, h, d].item():.3g} lse {lse[h, t].item():.6g} ref_lse "
                  f"{ref_lse[h, t].item():.6g} sink {inp['sinks'][h].item() if inp.get('sinks') is not None else None}"
                  f" v[:,d]*desc {[round(x, 5) for x in vcol[:4]]}", flush=True)
            print(f"     row out {[round(x, 4) for x in o[t, h].double().tolist()]}", flush=True)
            print(f"     row ref {[round(x, 4) for x in ref[t, h].tolist()]}", flush=True)
            print(f"     row err/bound max {max(row_ratio):.3f}, >0.5 at dims "
                  f"{[i for i, x in enumerate(row_ratio) if x > 0.5]}", flush=True)
    return nbad


study(case, 24, "replay")
for label, ch in [("no sinks", {"sinks": False}), ("e4m3 kv", {"kv_dtype": "e4m3"}), ("no head swizzle", {"head_swizzle": False}),
                  ("bf16 out", {"out_dtype": "bf16", "dtype": "bf16"}), ("unsorted", {"sort": False})]:
    c = copy.deepcopy(case); c.update(ch)
    try:
        study(c, 12, label)
    except Exception as e:
        print(f"[{label}] raised {type(e).__name__}: {e}", flush=True)
# just request 12 and its neighbours
c = copy.deepcopy(case)
keep = [10, 11, 12, 13, 14]
for key in ("qlens", "klens", "kv_slack"):
    c[key] = [case[key][i] for i in keep]
try:
    study(c, 12, "requests 10-14")
except Exception as e:
    print(f"[requests 10-14] raised {type(e).__name__}: {e}", flush=True)
