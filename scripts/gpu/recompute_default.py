#!/usr/bin/env python3
"""What install_torch()'s default recomputation does to real jobs, before any
cut: which model it found, its blocks, which blocks the check passed or
refused (libvmem_recompute._Purity), and whether the search hook is gone.

    python3 scripts/gpu/recompute_default.py [JOB ...]   (one process per job)
    (bash scripts/gpu-run.sh device ... with framework_proof.sh's paths, as
    scripts/gpu/cut-bench.sh sets them)

JOB: the jobs of cut_bench.py (gpt2, bert, resnet50, vit, convnext, effnet,
swin), or:
  infer    ResNet-50 in eval mode under no_grad only: the hook must be gone
           after libvmem's call budget (_FIND_CALLS module calls)
  hooked   GPT-2 with a forward hook on one block's MLP: that block's class is
           refused with a warning, the hook named
  counter  GPT-2 whose blocks count their calls in an attribute: refused
  overhead GPT-2, uncut: what the wrappers cost a full step (their reads of
           libvmem's statistics, the checks), as steps with the wrappers on
           and off (Recompute.enabled) in turn within the process
  ckpt-nr, ckpt-re
           GPT-2 (eager attention, deterministic) under the program's own
           gradient checkpointing (transformers' gradient_checkpointing_enable,
           non-reentrant or reentrant): 4 uncut steps, then cut to 50% of the
           peak in use for 6 steps.  Run twice, with VMEM_TORCH_RECOMPUTE=1
           and 0: the losses (bitwise), the cut steps' times and how many
           block calls libvmem recomputed on top of the program's checkpoint
Each job prints one JSON line.  Runs a few uncut training steps only (the
ckpt jobs also cut steps).
"""
import json
import os
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def one(job):
    import cut_bench  # the jobs' builders
    import framework_proof as fp  # sets python/ on the path; loads libvmem.so
    L = fp.load_libvmem()
    import torch
    L.install_torch()
    out = {"job": job}
    caught = []
    warnings.simplefilter("always")
    old_show = warnings.showwarning

    def show(msg, cat, *a, **kw):
        caught.append(str(msg))
        old_show(msg, cat, *a, **kw)
    warnings.showwarning = show
    if job == "infer":
        import torchvision
        model = torchvision.models.resnet50(weights=None).cuda().eval()
        x = torch.randn(8, 3, 224, 224, device="cuda")
        calls = 0
        with torch.no_grad():
            for i in range(40):
                model(x)
                calls += sum(1 for _ in model.modules())
                if i in (0, 39):
                    out["hook_after_%d_forwards" % (i + 1)] = L._find_hook is not None
        out["module_calls"] = calls
    elif job.startswith("ckpt-"):
        user_checkpoint(L, torch, job, out)
    else:
        base = "gpt2" if job in ("hooked", "counter", "overhead") else job
        model, opt, step_fn, amp = cut_bench.build(base, torch, None)
        model = model.cuda().train()
        if job == "hooked":
            blk = model.transformer.h[3]
            blk.mlp.register_forward_hook(lambda m, i, o: None)
        if job == "counter":
            cls = type(model.transformer.h[0])
            orig = cls.forward

            def counting(self, *a, **kw):
                self.calls_seen = getattr(self, "calls_seen", 0) + 1
                return orig(self, *a, **kw)
            cls.forward = counting
        scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
        adt = torch.float16 if amp == "fp16" else torch.bfloat16
        def train_step(i):
            with torch.autocast("cuda", dtype=adt, enabled=amp is not None):
                loss = step_fn(model, i)
            opt.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
        for i in range(4):
            train_step(i)
        torch.cuda.synchronize()
        out["hook_left"] = L._find_hook is not None
        if job == "overhead":
            import statistics
            import time
            import libvmem_recompute as rcm
            rc = rcm._rc[0]
            ms = {True: [], False: []}
            for rnd in range(12):
                on = rnd % 2 == 0
                rc.enabled = on
                for i in range(5):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    train_step(i)
                    torch.cuda.synchronize()
                    if i:  # the first of each run of five is left out
                        ms[on].append((time.perf_counter() - t0) * 1e3)
            rc.enabled = True
            out["step_ms_wrappers_on"] = round(statistics.median(ms[True]), 2)
            out["step_ms_wrappers_off"] = round(statistics.median(ms[False]), 2)
            out["on_over_off"] = round(statistics.median(ms[True]) /
                                       statistics.median(ms[False]), 4)
    rs = L.recompute_stats()
    out.update({k: rs.get(k) for k in ("installed", "blocks", "checked", "unsafe",
                                        "require_safe", "need", "chosen")})
    import libvmem_recompute as rcm
    if rcm._rc:
        out["block_class"] = sorted(set(type(b).__name__ for b in rcm._rc[0].blocks))
    out["warnings"] = [w for w in caught if "libvmem" in w]
    print(json.dumps(out), flush=True)


def user_checkpoint(L, torch, job, out):
    """The ckpt-* jobs: GPT-2 under the program's own gradient checkpointing,
    4 uncut steps, then 6 cut to half the peak in use."""
    import time
    import transformers
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    cfg = transformers.GPT2Config()
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.cuda().train()
    model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": job == "ckpt-re"})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    g = torch.Generator().manual_seed(1)
    toks = [torch.randint(0, cfg.vocab_size, (8, 1024), generator=g) for _ in range(2)]
    losses, ms = [], {"full": [], "cut": []}
    for i in range(10):
        if i == 4:
            torch.cuda.synchronize()
            peak = L.stats()["devicePeakInUse"]
            out["peak_in_use_gb"] = round(peak / 1e9, 3)
            L.set_limit(int(peak * 0.5))
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x = toks[i % 2].cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        ms["full" if i < 4 else "cut"].append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.float().item().hex())
    out["losses"] = losses
    out["full_ms"] = round(min(ms["full"][1:]), 1)
    out["cut_ms"] = [round(t, 1) for t in ms["cut"]]
    rs = L.recompute_stats()
    out["recomputed_calls"] = rs.get("recomputed_calls")
    out["gains_mib"] = [None if v is None else round(v / (1 << 20), 1)
                        for v in (rs.get("gains") or [])]


def run_one(job, env=None):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", job],
                       capture_output=True, text=True, timeout=300, env=env)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if lines:
        return json.loads(lines[-1]), r.returncode
    return {"job": job, "rc": r.returncode, "err": r.stderr[-800:]}, r.returncode


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        one(sys.argv[2])
        return 0
    jobs = sys.argv[1:] or ["gpt2", "bert", "resnet50", "vit", "convnext", "effnet", "swin",
                            "infer", "hooked", "counter"]
    bad = 0
    for j in jobs:
        if j.startswith("ckpt-"):  # with libvmem's recomputation and without
            res = {}
            for flag in ("1", "0"):
                res[flag], rc = run_one(j, dict(os.environ, VMEM_TORCH_RECOMPUTE=flag))
                res[flag]["recompute_env"] = flag
                print(json.dumps(res[flag]), flush=True)
                bad += rc != 0
            same = res["1"].get("losses") is not None and \
                res["1"].get("losses") == res["0"].get("losses")
            print(json.dumps({"job": j, "losses_bitwise_equal": same}), flush=True)
            bad += not same
            continue
        r, rc = run_one(j)
        print(json.dumps(r), flush=True)
        bad += rc != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
