#!/usr/bin/env python3
"""A transformers GPT-2 wrapped in DistributedDataParallel (one process,
world size 1) on libvmem with install_torch()'s defaults, cut between two
steps: recomputation, found by install_torch on the wrapper, reads the inner
model's config and decides before the forward, so the first step under the
cut makes no key/value cache and recomputes (no call run plain); the losses
equal those of the same run uncut, from the same seed (eager attention,
deterministic algorithms).  Prints one line per check; exits 1 on a failure.

    python3 scripts/gpu/recompute_wrapped.py        (runs both processes)
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
STEPS, CUT_AT = 7, 3


def run(cut):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import framework_proof as fp
    L = fp.load_libvmem()
    import torch
    import torch.distributed as dist
    from transformers import GPT2Config, GPT2LMHeadModel
    L.install_torch()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    try:
        dist.init_process_group("nccl", rank=0, world_size=1)
        backend = "nccl"
    except Exception:  # noqa: BLE001 (a machine without NCCL: gloo reduces CUDA tensors too)
        dist.init_process_group("gloo", rank=0, world_size=1)
        backend = "gloo"
    cfg = GPT2Config(n_layer=6, n_embd=512, n_head=8, attn_implementation="eager")
    model = torch.nn.parallel.DistributedDataParallel(GPT2LMHeadModel(cfg).cuda().train())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    losses, per_step = [], []
    import libvmem_recompute as rcm
    for s in range(STEPS):
        if cut and s == CUT_AT:  # 60% of the peak in use so far
            L.set_limit(int(L.stats()["devicePeakInUse"] * 0.6))
        before = rcm.stats()
        x = torch.randint(0, cfg.vocab_size, (8, 512), device="cuda", generator=gen)
        out = model(input_ids=x, labels=x)
        out.loss.backward()
        opt.step()  # install_torch's optimizer hook ends libvmem's step
        opt.zero_grad(set_to_none=True)
        losses.append(float(out.loss).hex())
        after = rcm.stats()
        per_step.append({k: after.get(k, 0) - before.get(k, 0)
                         for k in ("recomputed_calls", "plain_stateful_calls")})
    st = rcm.stats()
    dist.destroy_process_group()
    print(json.dumps({"losses": losses, "per_step": per_step, "backend": backend,
                      "installed_on": type(rcm._rc[0].blocks[0]).__name__ if rcm._rc else None,
                      "config_found": bool(rcm._rc and rcm._rc[0]._config is not None),
                      "use_cache_now": getattr(model.module.config, "use_cache", None),
                      "blocks": st.get("blocks")}))


def main():
    if len(sys.argv) == 2:
        run(sys.argv[1] == "cut")
        return
    res = {}
    for mode in ("uncut", "cut"):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), mode],
                           capture_output=True, text=True)
        lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
        if p.returncode != 0 or not lines:
            print("FAIL: the %s process (rc %d): %s" % (mode, p.returncode, p.stderr[-2000:]))
            sys.exit(1)
        res[mode] = json.loads(lines[-1])
    c, u = res["cut"], res["uncut"]
    fails = []

    def check(ok, what):
        print("%s: %s" % ("ok" if ok else "FAIL", what), flush=True)
        if not ok:
            fails.append(what)
    check(c["installed_on"] == "GPT2Block" and c["config_found"],
          "recomputation found GPT2Block under the DDP wrapper (%s), and the inner model's "
          "config (%s; %s)" % (c["installed_on"], c["config_found"], c["backend"]))
    first = c["per_step"][CUT_AT]
    check(first["recomputed_calls"] > 0 and first["plain_stateful_calls"] == 0,
          "the first step under the cut recomputed %d block calls, %d ran plain" %
          (first["recomputed_calls"], first["plain_stateful_calls"]))
    check(all(p["recomputed_calls"] == 0 for p in u["per_step"]),
          "the uncut run recomputed nothing")
    check(c["losses"] == u["losses"], "losses bitwise equal to the uncut run's: %s" %
          ("yes" if c["losses"] == u["losses"] else "%s against %s" % (c["losses"], u["losses"])))
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
