#!/usr/bin/env python3
"""Real frameworks on libvmem, on a real GPU (issue 5), in one go.

    python3 scripts/gpu/framework_proof.py [--quick] [--parts 1,2,3,4,5,6]
    (or bash scripts/gpu/framework_proof.sh, which builds libvmem if needed)

Parts (each in its own process, logs and JSON under $OUT):
  1  a transformer (GPT-2 small shape; transformers if installed, else a
     built-in model of the same shape; --model resnet50 for torchvision's)
     trains 30 steps on libvmem and on PyTorch's own allocator, same seed,
     deterministic settings: the losses must match;
  2  one libvmem run: 10 steps at full memory, the limit cut to half of the
     run's peak through the control file (VMEM_CONTROL_FILE, written with
     vmemctl when built), 10 steps (no OOM; the cut bites: bytes spilled to
     host, or, with install_torch's defaults, blocks recomputed or saved
     tensors offloaded instead), the limit raised back, 10 steps; step times
     per phase;
  3  the same cut with PyTorch's own allocator
     (torch.cuda.set_per_process_memory_fraction at the same bytes) must end
     in out-of-memory;
  4  a CuPy workload larger than its libvmem limit completes, equal to NumPy,
     with bytes spilled;
  5  examples/train_mlp (cuBLAS on the vtable allocator) trains and its loss
     falls, with and without a limit that spills;
  6  two-rank DDP on libvmem, the limit of rank 1 cut to half its peak
     mid-run: both ranks finish, and their parameters end bitwise equal to
     each other and to those of the same run without the cut.
     With two or more GPUs, NCCL and a GPU per rank; with one GPU, both
     ranks on it with the gloo backend (NCCL refuses two ranks on one
     device): DDP's hooks, buckets and allreduce on libvmem memory under a
     cut, not NCCL's transport.
The summary table is printed last.  Exit status 0 iff every part that ran
passed.  Environment: OUT (default /tmp/vmem-proof), VMEM_LIBRARY, BUILD
(build dir with examples/ and tools/, default build-gpu), VMEM_TEST_LD (a
library path for the C binaries), VMEM_CUBLAS (libcublas for train_mlp).
"""

import argparse
import ctypes
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# VMEM_PYTHON_DIR: another copy of python/ (an A/B of the adapters in one call)
sys.path.insert(0, os.environ.get("VMEM_PYTHON_DIR") or os.path.join(ROOT, "python"))

OUT = os.environ.get("OUT") or "/tmp/vmem-proof"
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build-gpu"))
GiB = 1 << 30
MiB = 1 << 20


# --------------------------------------------------------------------------
# Helpers shared by the orchestrator and the workers
# --------------------------------------------------------------------------

def carried_dirs():
    dirs = [d for d in os.environ.get("VMEM_TEST_LD", "").split(":") if d]
    dirs += [os.path.join(BUILD, "carry-libs"), os.path.join(BUILD, "carry-cuda")]
    return [d for d in dirs if os.path.isdir(d)]


def load_libvmem():
    """Imports python/libvmem.py and loads libvmem.so.  A dependency the
    machine lacks (libcjson on a bare GPU host) is preloaded from the carried
    libraries by absolute path, so that the Python process keeps its own
    libraries otherwise."""
    import libvmem
    for _ in range(8):
        try:
            libvmem.load()
            return libvmem
        except OSError as e:
            m = re.search(r"([\w.+-]+\.so[\w.]*): cannot open shared object file", str(e))
            if not m:
                raise
            name = m.group(1)
            cands = [os.path.join(d, name) for d in carried_dirs()]
            cands = [c for c in cands if os.path.exists(c)]
            if not cands:
                raise
            ctypes.CDLL(cands[0], mode=ctypes.RTLD_GLOBAL)
    return libvmem


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def log(*a):
    print(*a, flush=True)


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

def pick_model(requested):
    import importlib.util
    if requested != "auto":
        return requested
    if importlib.util.find_spec("transformers"):
        return "gpt2"
    return "gpt2-builtin"


def build_model(kind, torch):
    """Returns (model, make_batch(step) -> inputs, loss_fn(model, inputs))."""
    nn = torch.nn
    F = torch.nn.functional
    g = torch.Generator().manual_seed(1234)
    if kind == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(weights=None, num_classes=1000)
        xs = [torch.randn(ARGS.batch, 3, 224, 224, generator=g) for _ in range(4)]
        ys = [torch.randint(0, 1000, (ARGS.batch,), generator=g) for _ in range(4)]

        def make_batch(step):
            i = step % 4
            return xs[i].to(DEV), ys[i].to(DEV)

        def loss_fn(m, b):
            return F.cross_entropy(m(b[0]), b[1])
        return model, make_batch, loss_fn

    vocab, ctx, layers, heads, width = 50257, 1024, 12, 12, 768
    if ARGS.tiny:  # a smoke-test size, not GPT-2 small
        vocab, layers, heads, width = 1024, 2, 4, 128
    toks = [torch.randint(0, vocab, (ARGS.batch, ARGS.seq), generator=g) for _ in range(4)]

    def make_batch(step):
        return toks[step % 4].to(DEV)

    if kind == "gpt2":
        import transformers
        cfg = transformers.GPT2Config(n_positions=ctx, n_embd=width, n_layer=layers, n_head=heads,
                                      vocab_size=vocab)
        try:  # explicit softmax attention: deterministic backward
            model = transformers.AutoModelForCausalLM.from_config(cfg,
                                                                   attn_implementation="eager")
        except (TypeError, ValueError):
            model = transformers.GPT2LMHeadModel(cfg)

        def loss_fn(m, x):
            return m(input_ids=x, labels=x).loss
        return model, make_batch, loss_fn

    # gpt2-builtin: the GPT-2 small shape in plain PyTorch (pre-norm blocks,
    # GELU MLP, tied embeddings, explicit softmax attention).
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
            self.drop = nn.Dropout(0.1)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / (c // heads) ** 0.5)
            mask = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
            att = self.drop(att.masked_fill(~mask, float("-inf")).softmax(-1))
            y = (att @ v).transpose(1, 2).reshape(b, t, c)
            x = x + self.drop(self.proj(y))
            return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(ctx, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(width)
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.normal_(p, std=0.02)

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x) @ self.wte.weight.t()

    def loss_fn(m, x):
        logits = m(x)
        return F.cross_entropy(logits[:, :-1].reshape(-1, vocab), x[:, 1:].reshape(-1))
    return GPT(), make_batch, loss_fn


# --------------------------------------------------------------------------
# Worker: training runs (parts 1, 2, 3)
# --------------------------------------------------------------------------

def worker_train(a):
    """--alloc vmem|torch; --cut: 10/10/10 steps with the limit (vmem) or the
    memory fraction (torch) cut after step 10 and (vmem) raised after 20."""
    global DEV
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    L = None
    if a.alloc == "vmem":
        L = load_libvmem()
    import torch
    if a.dry_cpu:
        DEV = "cpu"
    elif L is not None:
        L.install_torch(step_hook=False)  # before anything touches CUDA memory; steps marked below
    torch.manual_seed(a.seed)
    torch.cuda.manual_seed_all(a.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    cuda = not a.dry_cpu
    res = {"alloc": a.alloc, "model": a.model, "steps": [], "ok": False, "error": None,
           "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0) if cuda else "cpu (dry run)",
           "total_memory": torch.cuda.get_device_properties(0).total_memory if cuda else 0}
    model, make_batch, loss_fn = build_model(a.model, torch)
    model = model.to(DEV).train()
    res["params"] = sum(p.numel() for p in model.parameters())
    if a.model == "resnet50":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)

    control = a.control_file
    cut_at, raise_at = (10, 20) if a.cut else (None, None)
    start_limit = L.get_limit() if L else None
    res["start_limit"] = start_limit
    try:
        for step in range(a.steps):
            t0 = time.perf_counter()
            if L is not None and not cuda:  # dry run: a working set on the sim device
                emulated = [L.load().vmem_torch_malloc(64 * MiB, 0, None) for _ in range(4)]
            batch = make_batch(step)
            loss = loss_fn(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            lv = loss.item()
            if cuda:
                torch.cuda.synchronize()
            elif L is not None:
                for p in emulated:
                    L.load().vmem_torch_free(p, 64 * MiB, 0, None)
            dt = time.perf_counter() - t0
            rec = {"step": step, "loss": lv, "ms": dt * 1e3}
            if L is not None:
                if a.cut and step + 1 in (cut_at, raise_at):
                    rec["control"] = change_limit(L, a, res, step + 1 == cut_at)
                L.step_end()
                s = L.stats()
                rec.update(limit=s["limit"], dev_max=s["deviceMemUsedMax"],
                           host_max=s["hostMemUsedMax"], spilled=s["spilledBytes"],
                           held=s["deviceHeld"], pending=s["pendingLimit"],
                           # cumulative, as spilledBytes: what else the cut made happen
                           recomputed=L.recompute_stats().get("recomputed_calls", 0),
                           offloaded=L.offload_stats().get("offloaded_bytes", 0))
            elif cuda:
                rec.update(allocated_max=torch.cuda.max_memory_allocated(),
                           reserved=torch.cuda.memory_reserved())
                if a.cut and step + 1 == cut_at:
                    res["reserved_at_cut"] = torch.cuda.memory_reserved()
                    if not a.cut_bytes:  # no libvmem run to take it from
                        a.cut_bytes = torch.cuda.max_memory_allocated() // 2
                    res["cut_bytes"] = a.cut_bytes
                    frac = a.cut_bytes / res["total_memory"]
                    torch.cuda.set_per_process_memory_fraction(frac, 0)
                    res["fraction"] = frac
                    res["reserved_after_fraction"] = torch.cuda.memory_reserved()
                    torch.cuda.empty_cache()  # give the memory back, as a cut requires
                    res["reserved_after_empty_cache"] = torch.cuda.memory_reserved()
                    log("torch: fraction %.4f (%d MiB), reserved %d -> %d MiB" % (
                        frac, a.cut_bytes >> 20, res["reserved_at_cut"] >> 20,
                        res["reserved_after_empty_cache"] >> 20))
            res["steps"].append(rec)
            log("step %2d loss %.6f %8.1f ms %s" % (step, lv, dt * 1e3, {
                k: v for k, v in rec.items() if k not in ("step", "loss", "ms")}))
        res["ok"] = True
    except torch.cuda.OutOfMemoryError as e:
        res["error"] = "OutOfMemoryError"
        res["oom_step"] = len(res["steps"])
        res["oom_message"] = str(e).splitlines()[0][:300]
        log("OOM at step %d: %s" % (res["oom_step"], res["oom_message"]))
    except Exception as e:  # reported, not hidden
        res["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
        log("error:", res["error"])
    if L is not None:
        res["final_stats"] = L.stats()
    elif cuda:
        res["peak_allocated"] = torch.cuda.max_memory_allocated()
    write_json(a.result, res)
    return 0


def change_limit(L, a, res, cut):
    """Cuts (cut True) or restores the limit before the coming step_end."""
    if cut:
        peak = max(s.get("dev_max", 0) for s in res["steps"])
        peak = max(peak, L.stats()["devicePeakInUse"])
        # VMEM_PROOF_CUT_FRACTION (default 0.5): the cut as a fraction of the
        # peak; a small one (0.1) cuts below the bytes live between steps
        # (weights, optimizer state), which only the vmm backend can honour,
        # by evicting live blocks to host memory at the step end.
        frac = float(os.environ.get("VMEM_PROOF_CUT_FRACTION", "0.5"))
        target = int(peak * frac)
        res["peak_in_use"] = peak
        res["cut_fraction"] = frac
        res["cut_bytes"] = target
    else:
        target = res["start_limit"]
    how = "set_limit"
    if a.control_file:
        vmemctl = os.path.join(BUILD, "tools", "vmemctl")
        if os.access(vmemctl, os.X_OK):
            env = dict(os.environ)
            if os.environ.get("VMEM_TEST_LD"):
                env["LD_LIBRARY_PATH"] = os.environ["VMEM_TEST_LD"]
            r = subprocess.run([vmemctl, "set-limit", a.control_file, str(target)], env=env,
                               capture_output=True, text=True)
            how = "vmemctl set-limit" if r.returncode == 0 else None
            if r.returncode != 0:
                log("vmemctl failed (%d): %s" % (r.returncode, r.stderr.strip()))
        else:
            how = None
        if how is None:  # write the file ourselves, atomically
            tmp = a.control_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"limit": target}, f)
            os.replace(tmp, a.control_file)
            how = "control file (written by the script)"
        # The watcher sees it within milliseconds (inotify; 100 ms polling);
        # the change takes effect at the step end that follows.
        time.sleep(0.5)
    else:
        L.set_limit(target)
    return {"target": target, "how": how, "cut": cut}


# --------------------------------------------------------------------------
# Worker: CuPy (part 4)
# --------------------------------------------------------------------------

def worker_cupy(a):
    res = {"ok": False, "error": None}
    try:
        L = load_libvmem()
        import cupy
        import numpy as np
        L.install_cupy()
        n = a.cupy_n
        rng = np.random.default_rng(7)
        host = [rng.standard_normal((n, n), dtype=np.float32) / np.sqrt(n) for _ in range(4)]
        dev = [cupy.asarray(h) for h in host]
        # A chain whose intermediates all stay alive: 4 inputs + 8 results.
        chain_d, chain_h = list(dev), list(host)
        for i in range(8):
            x, y = chain_d[-1], chain_d[i % 4]
            chain_d.append(cupy.tanh(x @ y + chain_d[-2]))
            xh, yh = chain_h[-1], chain_h[i % 4]
            chain_h.append(np.tanh(xh @ yh + chain_h[-2]))
        total = sum(int(d.nbytes) for d in chain_d)
        worst = 0.0
        for d, h in zip(chain_d, chain_h):
            diff = float(np.max(np.abs(cupy.asnumpy(d) - h)))
            worst = max(worst, diff)
        s = L.stats()
        res.update(ok=True, n=n, arrays=len(chain_d), working_set=total, limit=s["limit"],
                   spilled=s["spilledBytes"], spills=s["spills"], host_max=s["hostPeakInUse"],
                   max_abs_diff=worst, correct=worst < 1e-3, backend=s["backend"],
                   cupy=cupy.__version__)
        log(json.dumps(res))
    except Exception as e:
        res["error"] = "%s: %s" % (type(e).__name__, e)
        log("error:", res["error"])
    write_json(a.result, res)
    return 0


# --------------------------------------------------------------------------
# Worker: two-GPU DDP (part 6)
# --------------------------------------------------------------------------

def ddp_rank(rank, world, a, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29518" if a.ddp_uncut else "29517")
    L = load_libvmem()
    import torch
    import torch.distributed as dist
    L.install_torch(step_hook=False)  # before set_device: CUDA's lazy init fixes the allocator
    dev = 0 if a.ddp_one_gpu else rank
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo" if a.ddp_one_gpu else "nccl", rank=rank, world_size=world)
    torch.manual_seed(0)
    # eight repeated blocks (a Linear and a ReLU each): install_torch's
    # default recomputation finds them, so the cut rank recomputes some in
    # its backward while the other does not
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4096, 4096),
                                                      torch.nn.ReLU())
                                  for _ in range(8)]).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev])
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    rec = {"rank": rank, "losses": [], "ok": False}
    try:
        for step in range(30):
            x = torch.randn(256, 4096, device="cuda")
            loss = ddp(x).square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            rec["losses"].append(loss.item())
            if rank == 1 and step == 9 and not a.ddp_uncut:
                peak = L.stats(dev)["devicePeakInUse"]
                rec["cut"] = peak // 2
                L.set_limit(peak // 2, device=dev)
            L.step_end(dev)
        rec["stats"] = L.stats(dev)
        # DDP keeps the replicas equal: the same averaged gradients, the
        # same update.  A cut rank whose spilled blocks lost or mixed up
        # data would drift from the other.
        import hashlib
        h = hashlib.sha256()
        for prm in model.parameters():
            h.update(prm.detach().float().cpu().numpy().tobytes())
        rec["params_sha256"] = h.hexdigest()
        off = L.offload_stats()  # the saved tensor offload (on by default) under DDP
        rec["offload"] = {k: off.get(k) for k in ("installed", "offloaded_bytes",
                                                  "prefetched_bytes", "late_fetch_bytes",
                                                  "steps_active")}
        rcs = L.recompute_stats()
        rec["recompute"] = {k: rcs.get(k) for k in ("installed", "blocks", "checked", "unsafe",
                                                    "recomputed_calls", "steps_active")}
        rec["ok"] = True
    except Exception as e:
        rec["error"] = "%s: %s" % (type(e).__name__, e)
    write_json(os.path.join(out, "part6-rank%d.json" % rank), rec)
    dist.destroy_process_group()


def worker_ddp(a):
    import torch.multiprocessing as mp
    mp.spawn(ddp_rank, args=(2, a, OUT), nprocs=2, join=True)
    ranks = []
    for r in range(2):
        with open(os.path.join(OUT, "part6-rank%d.json" % r)) as f:
            ranks.append(json.load(f))
    same = len({r.get("params_sha256") for r in ranks}) == 1
    write_json(a.result, {"ok": all(r["ok"] for r in ranks) and same, "params_equal": same,
                          "ranks": ranks})
    return 0


# --------------------------------------------------------------------------
# Orchestrator
# --------------------------------------------------------------------------

def run_worker(name, args, env_extra=None, timeout=240):
    """Runs this script as a worker; returns the worker's JSON (or an error
    record).  stdout/stderr go to $OUT/<name>.log."""
    result = os.path.join(OUT, name + ".json")
    if os.path.exists(result):
        os.remove(result)
    env = dict(os.environ)
    env.update(env_extra or {})
    cmd = [sys.executable, os.path.abspath(__file__), "--worker"] + args + ["--result", result]
    t0 = time.time()
    with open(os.path.join(OUT, name + ".log"), "w") as logf:
        logf.write("$ %s\n" % " ".join(cmd))
        logf.flush()
        try:
            rc = subprocess.run(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout %ds" % timeout
    wall = time.time() - t0
    try:
        with open(result) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {"ok": False, "error": "worker exited %s without a result (see %s.log)" % (rc, name)}
    res["wall_s"] = round(wall, 1)
    log("[%s] exit %s in %.1f s" % (name, rc, wall))
    return res


def control_file_supported():
    """1 if this libvmem accepts VMEM_CONTROL_FILE (tried on the simulated
    device in a child process), else 0."""
    path = os.path.join(OUT, "probe-control.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VMEM_")
           or k in ("VMEM_LIBRARY", "VMEM_TEST_LD")}
    env.update(VMEM_BACKEND="sim", VMEM_CONTROL_FILE=path)
    code = ("import sys; sys.path.insert(0, %r); sys.argv=['x']\n"
            "import importlib.util as u\n"
            "spec = u.spec_from_file_location('fp', %r); fp = u.module_from_spec(spec)\n"
            "spec.loader.exec_module(fp)\n"
            "L = fp.load_libvmem(); L.stats(); print('OK')\n") % (
                os.path.join(ROOT, "python"), os.path.abspath(__file__))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    return r.returncode == 0 and "OK" in r.stdout


def probe_torch():
    """PyTorch's version and the GPUs it sees, asked in a child process so
    that this one never holds a CUDA context while the workers run."""
    code = ("import json, torch\n"
            "n = torch.cuda.device_count()\n"
            "print(json.dumps({'torch': torch.__version__, 'ngpu': n,\n"
            "                  'gpu': torch.cuda.get_device_name(0) if n else 'none'}))\n")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120)
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return {"torch": "not importable", "ngpu": 0, "gpu": "none"}


def find_cublas():
    if os.environ.get("VMEM_CUBLAS"):
        return os.environ["VMEM_CUBLAS"]
    pats = ["/usr/local/cuda/lib64/libcublas.so*", "/usr/local/cuda*/lib64/libcublas.so*",
            "/usr/local/cuda*/targets/*/lib/libcublas.so*", "/usr/lib/x86_64-linux-gnu/libcublas.so*"]
    for sp in sys.path:
        pats.append(os.path.join(sp, "nvidia", "cublas", "lib", "libcublas.so*"))
        pats.append(os.path.join(sp, "nvidia", "cu13", "lib", "libcublas.so*"))
    for p in pats:
        hits = sorted(h for h in glob.glob(p) if "Lt" not in os.path.basename(h))
        if hits:
            return hits[-1]
    return None


def run_train_mlp(name, extra):
    exe = os.path.join(BUILD, "examples", "train_mlp")
    if not os.access(exe, os.X_OK):
        return {"ok": False, "error": "%s not built (needs nvcc)" % exe}
    env = dict(os.environ)
    if os.environ.get("VMEM_TEST_LD"):
        env["LD_LIBRARY_PATH"] = os.environ["VMEM_TEST_LD"]
    cublas = find_cublas()
    if cublas:
        env["VMEM_CUBLAS"] = cublas
    cmd = [exe] + extra
    t0 = time.time()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    with open(os.path.join(OUT, name + ".log"), "w") as f:
        f.write("$ VMEM_CUBLAS=%s %s\n%s%s" % (cublas, " ".join(cmd), r.stdout, r.stderr))
    m = re.search(r"^RESULT (\{.*\})$", r.stdout, re.M)
    res = json.loads(m.group(1)) if m else {"error": "no RESULT line (exit %d)" % r.returncode}
    res["exit"] = r.returncode
    res["ok"] = r.returncode == 0 and bool(res.get("loss_fell"))
    res["wall_s"] = round(time.time() - t0, 1)
    res["cublas"] = cublas
    return res


def phase_table(steps):
    """Median step time per phase and the recovery after the raise."""
    ms = [s["ms"] for s in steps]
    p1, p2, p3 = ms[2:10], ms[10:20], ms[20:30]   # p1 without the 2 warm-up steps
    ref = statistics.median(p1) if p1 else float("nan")
    back = None
    for i, t in enumerate(p3):
        if t <= 1.10 * ref:
            back = i + 1
            break
    return {"p1_median": ref, "p2_median": statistics.median(p2) if p2 else float("nan"),
            "p3_median": statistics.median(p3) if p3 else float("nan"),
            "p3_first": p3[:3], "back_within": back,
            "recovered": back is not None and back <= 2}


def main_orchestrate(a):
    os.makedirs(OUT, exist_ok=True)
    parts = {int(p) for p in a.parts.split(",") if p.strip()}
    rows = []  # (part, what, result, PASS/FAIL/SKIP)
    summary = {"args": vars(a), "parts": {}}
    t_start = time.time()

    try:
        L = load_libvmem()
        lib_path = L.library_path()
    except OSError as e:
        log("libvmem not found: %s" % e)
        return 2
    log("libvmem: %s" % lib_path)
    os.environ["VMEM_LIBRARY"] = lib_path  # the workers load the same file
    probe = probe_torch()
    ngpu, gpu, torch_ver = probe["ngpu"], probe["gpu"], probe["torch"]
    if a.dry_cpu:
        ngpu, gpu = 1, "cpu (DRY RUN: nothing here is a GPU result)"
    model = pick_model(a.model)
    log("GPU: %s x%d, torch %s, model %s" % (gpu, ngpu, torch_ver, model))
    summary.update(gpu=gpu, ngpu=ngpu, torch=torch_ver, model=model, libvmem=lib_path)
    if ngpu == 0:
        log("no GPU visible to PyTorch: parts 1-3 and 6 cannot run")

    common = ["--model", model, "--batch", str(a.batch), "--seq", str(a.seq),
              "--seed", str(a.seed)] + (["--dry-cpu"] if a.dry_cpu else []) + \
        (["--tiny"] if a.tiny else [])
    # A clean environment for the libvmem runs: defaults (limit = the free
    # device memory) unless the caller set VMEM_* on purpose.
    vm_env = {"VMEM_LOG_LEVEL": os.environ.get("VMEM_LOG_LEVEL", "warn")}
    if a.dry_cpu:
        vm_env.update(VMEM_BACKEND="sim", VMEM_LIMIT="1G")

    ref = vm = None
    if 1 in parts and ngpu:
        ref = run_worker("part1-torch", ["train", "--alloc", "torch", "--steps", "30"] + common)
        vm = run_worker("part1-vmem", ["train", "--alloc", "vmem", "--steps", "30"] + common,
                        vm_env)
        la = [s["loss"] for s in ref.get("steps", [])]
        lb = [s["loss"] for s in vm.get("steps", [])]
        n = min(len(la), len(lb))
        diff = max((abs(x - y) for x, y in zip(la, lb)), default=float("nan"))
        identical = n == 30 and la == lb
        close = n == 30 and all(abs(x - y) <= 1e-5 * max(1.0, abs(x)) for x, y in zip(la, lb))
        ok = ref.get("ok") and vm.get("ok") and close
        summary["parts"]["1"] = {"torch": ref, "vmem": vm, "max_abs_diff": diff,
                                 "identical": identical}
        what = "%s, 30 steps, loss %.4f -> %.4f" % (model, la[0], la[-1]) if n else model
        res = ("bitwise identical" if identical else "max |diff| %.2e" % diff) + \
            "; ms/step torch %.1f vmem %.1f" % (
                statistics.median([s["ms"] for s in ref.get("steps", [])[2:]] or [0]),
                statistics.median([s["ms"] for s in vm.get("steps", [])[2:]] or [0]))
        if not ok:
            res += "; " + (ref.get("error") or vm.get("error") or "losses differ")
        rows.append(("1 losses match", what, res, "PASS" if ok else "FAIL"))

    cut_bytes = None
    if 2 in parts and ngpu:
        ctl = os.path.join(OUT, "control.json")
        env = dict(vm_env, VMEM_STATS_FILE=os.path.join(OUT, "part2-stats.json"))
        if os.path.exists(ctl):
            os.remove(ctl)
        if control_file_supported():
            env["VMEM_CONTROL_FILE"] = ctl
            args = ["--control-file", ctl]
            via = "control file"
        else:
            args, via = [], "python set_limit (control file not supported by this build)"
        r = run_worker("part2-cut", ["train", "--alloc", "vmem", "--steps", "30", "--cut"] +
                       common + args, env)
        steps = r.get("steps", [])
        ok = r.get("ok") and len(steps) == 30
        # spilledBytes is cumulative: what the cut phase (steps 10-19) spilled;
        # the same for the blocks recomputed and the saved tensors offloaded
        # (install_torch's defaults: a cut they cover spills nothing)
        def cut_phase(key):
            return steps[19].get(key, 0) - steps[9].get(key, 0) if len(steps) >= 20 else 0
        spilled, recomputed, offloaded = (cut_phase(k) for k in ("spilled", "recomputed",
                                                                 "offloaded"))
        held_cut = max((s.get("held", 0) for s in steps[10:20]), default=0)
        pt = phase_table(steps) if len(steps) == 30 else {}
        cut_bytes = r.get("cut_bytes")
        applied = [s for s in steps if s.get("control")]
        via_used = ", ".join(sorted({s["control"]["how"] for s in applied})) or via
        summary["parts"]["2"] = {"run": r, "phases": pt, "via": via_used}
        same = None
        if vm and vm.get("steps") and len(steps) == 30:
            same = [s["loss"] for s in steps] == [s["loss"] for s in vm["steps"]]
            summary["parts"]["2"]["losses_equal_part1"] = same
        # step i's record holds the limit after its step_end: the cut is in
        # force for steps 10..19, the raise from step 20 on.
        limits_ok = len(steps) == 30 and steps[9].get("limit") == cut_bytes and \
            steps[19].get("limit") == r.get("start_limit")
        # the cut must have bitten: bytes spilled, or blocks recomputed, or
        # saved tensors offloaded
        ok = bool(ok and (spilled > 0 or recomputed > 0 or offloaded > 0) and limits_ok)
        rows.append(("2 cut to %g of peak" % r.get("cut_fraction", 0.5),
                     "peak %s MiB -> limit %s MiB via %s" % (
                         (r.get("peak_in_use") or 0) >> 20, (cut_bytes or 0) >> 20, via_used),
                     "no OOM; spilled %d MiB, %d block calls recomputed, %d MiB offloaded; "
                     "device held <= %d MiB; limit followed: %s%s" % (
                         spilled >> 20, recomputed, offloaded >> 20, held_cut >> 20,
                         "yes" if limits_ok else "NO",
                         "" if same is None else "; losses = part 1: %s" % (
                             "yes" if same else "no")) if r.get("ok")
                     else (r.get("error") or "failed"),
                     "PASS" if ok else "FAIL"))
        if pt:
            rows.append(("2 step time", "median ms: full %.1f | cut %.1f (x%.1f) | raised %.1f" % (
                pt["p1_median"], pt["p2_median"], pt["p2_median"] / pt["p1_median"],
                pt["p3_median"]),
                "after raise: %s ms; within 10%% at step %s" % (
                    ", ".join("%.1f" % t for t in pt["p3_first"]), pt["back_within"]),
                "PASS" if pt["recovered"] else "FAIL"))

    if 3 in parts and ngpu:
        extra = ["--cut-bytes", str(cut_bytes or 0)]  # 0: half of its own peak
        r = run_worker("part3-torch-cut", ["train", "--alloc", "torch", "--steps", "30", "--cut"]
                       + common + extra)
        summary["parts"]["3"] = r
        oom = r.get("error") == "OutOfMemoryError"
        rows.append(("3 same cut, torch",
                     "set_per_process_memory_fraction(%.3f) + empty_cache" % r.get("fraction", 0),
                     ("OOM at step %d (reserved at cut %d MiB)" % (
                         r.get("oom_step", -1), r.get("reserved_at_cut", 0) >> 20)) if oom else
                     ("no OOM" if r.get("ok") else r.get("error")),
                     "SKIP" if a.dry_cpu else "PASS" if oom else "FAIL"))

    if 4 in parts:
        env = dict(vm_env, VMEM_LIMIT=str(a.cupy_limit))
        r = run_worker("part4-cupy", ["cupy", "--cupy-n", str(a.cupy_n)], env)
        summary["parts"]["4"] = r
        ok = r.get("ok") and r.get("correct") and r.get("spilled", 0) > 0
        rows.append(("4 CuPy over limit",
                     "%d arrays %dx%d, %d MiB set vs limit %d MiB" % (
                         r.get("arrays", 0), a.cupy_n, a.cupy_n, r.get("working_set", 0) >> 20,
                         r.get("limit", 0) >> 20) if r.get("ok") else "cupy",
                     "max |diff| vs NumPy %.1e; spilled %d MiB" % (
                         r.get("max_abs_diff", -1), r.get("spilled", 0) >> 20) if r.get("ok")
                     else r.get("error"),
                     "SKIP" if a.dry_cpu and not r.get("ok") else "PASS" if ok else "FAIL"))

    if 5 in parts:
        for name, extra in (("part5-mlp", ["--steps", "100"]),
                            ("part5-mlp-spill", ["--steps", "100", "--limit", "128M"])):
            r = run_train_mlp(name, extra)
            summary["parts"][name] = r
            rows.append(("5 train_mlp" + (" 128M" if "spill" in name else ""),
                         "%s steps, %.2f ms/step, backend %s" % (
                             r.get("steps"), r.get("ms_per_step", 0), r.get("backend"))
                         if "steps" in r else "exit %s" % r.get("exit"),
                         ("loss %.4f -> %.4f; spilled %d MiB" % (
                             r.get("loss_first", 0), r.get("loss_last", 0),
                             r.get("spilled_bytes", 0) >> 20)) if "loss_first" in r
                         else r.get("error"),
                         "SKIP" if a.dry_cpu and r.get("exit") == 77 else
                         "PASS" if r["ok"] else "FAIL"))

    if 6 in parts:
        if ngpu >= 1 and not a.dry_cpu:
            one = ngpu < 2
            w = ["ddp"] + (["--ddp-one-gpu"] if one else [])
            ref = run_worker("part6-ddp-uncut", w + ["--ddp-uncut"], vm_env, timeout=300)
            r = run_worker("part6-ddp", w, vm_env, timeout=300)
            # The cut run must end with the uncut run's parameters, bit for
            # bit (same seeds, same shapes, same reduction order): a rank
            # whose spilled blocks lost data would change the averaged
            # gradients, which equal replicas alone would not show.
            h_ref = {x.get("params_sha256") for x in ref.get("ranks") or []}
            h_cut = {x.get("params_sha256") for x in r.get("ranks") or []}
            r["params_equal_uncut"] = len(h_ref) == 1 and h_ref == h_cut
            r["ok"] = bool(r.get("ok") and ref.get("ok") and r["params_equal_uncut"])
            summary["parts"]["6"] = r
            summary["parts"]["6-uncut"] = ref
            r1 = (r.get("ranks") or [{}, {}])[1]
            o1, s1 = r1.get("offload") or {}, r1.get("stats") or {}
            res = r.get("error") or "failed"
            if r.get("ranks") and all(x.get("ok") for x in r["ranks"]):
                res = "params %s; rank 1: %.2f GB spilled, offload %.2f GB out in %s steps" % (
                    "equal across ranks and to an uncut run" if r["params_equal_uncut"] else
                    "equal across ranks, NOT to an uncut run" if r.get("params_equal") else
                    "DIFFER across ranks",
                    (s1.get("spilledBytes") or 0) / 1e9,
                    (o1.get("offloaded_bytes") or 0) / 1e9, o1.get("steps_active"))
            rows.append(("6 DDP 1 GPU, gloo" if one else "6 DDP 2 GPUs",
                         "limit of rank 1 cut to half its peak at step 10", res,
                         "PASS" if r.get("ok") else "FAIL"))
        else:
            rows.append(("6 DDP", "needs a GPU", "dry run on the CPU" if a.dry_cpu else
                         "this machine has none", "SKIP"))

    summary["wall_s"] = round(time.time() - t_start, 1)
    write_json(os.path.join(OUT, "framework_proof.json"), summary)
    w = [max(len(str(r[i])) for r in rows + [("part", "what", "result", "")]) for i in range(3)]
    log("")
    log("===== framework proof: %s, torch %s, %s, %.0f s (logs: %s)" % (
        gpu, torch_ver, model, summary["wall_s"], OUT))
    log("%-*s | %-*s | %-*s | %s" % (w[0], "part", w[1], "what", w[2], "result", "verdict"))
    for r in rows:
        log("%-*s | %-*s | %-*s | %s" % (w[0], r[0], w[1], r[1], w[2], r[2], r[3]))
    return 0 if rows and all(r[3] in ("PASS", "SKIP") for r in rows) else 1


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", choices=["train", "cupy", "ddp"])
    p.add_argument("--parts", default=os.environ.get("PROOF_PARTS", "1,2,3,4,5,6"),
                   help="parts to run (default: PROOF_PARTS, else all)")
    p.add_argument("--model", default="auto", choices=["auto", "gpt2", "gpt2-builtin",
                                                       "resnet50"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="smaller batches (a smoke run)")
    p.add_argument("--cupy-n", type=int, default=2048)
    p.add_argument("--cupy-limit", default="96M")
    p.add_argument("--tiny", action="store_true",
                   help="a 2-layer, width-128 transformer instead of GPT-2 small (smoke tests)")
    p.add_argument("--dry-cpu", action="store_true",
                   help="check the script itself without a GPU: CPU PyTorch, libvmem on the "
                        "simulated device with an emulated working set")
    # worker options
    p.add_argument("--alloc", choices=["vmem", "torch"])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--cut", action="store_true")
    p.add_argument("--cut-bytes", type=int, default=0)
    p.add_argument("--ddp-one-gpu", action="store_true",
                   help="part 6 worker: both ranks on GPU 0 with the gloo backend")
    p.add_argument("--ddp-uncut", action="store_true",
                   help="part 6 worker: no cut (the reference the cut run must equal)")
    p.add_argument("--control-file")
    p.add_argument("--result")
    a = p.parse_args()
    if a.quick:
        a.batch, a.seq = min(a.batch, 4), min(a.seq, 256)
    if a.dry_cpu:
        a.tiny = True
    return a


ARGS = None
DEV = "cuda"

if __name__ == "__main__":
    ARGS = parse()
    if ARGS.worker == "train":
        sys.exit(worker_train(ARGS))
    if ARGS.worker == "cupy":
        sys.exit(worker_cupy(ARGS))
    if ARGS.worker == "ddp":
        sys.exit(worker_ddp(ARGS))
    sys.exit(main_orchestrate(ARGS))
