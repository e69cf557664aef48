#!/usr/bin/env python3
"""Fast while cut (issue 11): step time of real training jobs whose libvmem
limit is cut below their peak, against the two floors, on a real GPU.

    python3 scripts/gpu/cut_bench.py [--jobs gpt2,resnet50,bert,vit,convnext,effnet,swin]
                                     [--modes naive,planned]
    (bash scripts/gpu/cut-bench.sh, through scripts/gpu-run.sh, sets the paths)

For each job and placement mode one process (libvmem as PyTorch's
allocator, VMEM_PLACEMENT set, steps marked by the optimizer post-step hook
that install_torch() installs) runs: F full steps; the limit cut to 75% of
the peak in use (devicePeakInUse) for C steps; raised back for R steps; cut
to 50% for C steps; raised back for R steps.  Per step: wall time (the step
synchronised), loss, bytes placed on host (spilledBytes), moved to host,
planned/fallback bytes, host bytes in use.  One more process per job, with
no cut, gives the losses to compare with (same seed, deterministic
settings).  The first process also measures, in the same run, a kernel's
bandwidth to mapped host memory (read and write through a libvmem block that
lies on host memory) and the copy bandwidth per direction (pinned host <->
device, cudaMemcpyAsync), which give the floors:
  zero-copy floor = full step + 2 x (peak in use - limit) / kernel bandwidth
  overlap floor   = max(full step, (peak in use - limit) / copy bandwidth)
The full step is the median of the second half of the F full steps (at least
from the third on); after each raise the table gives every step and the median
from the second step on against it, and (with the uncut process) against the
uncut steps of the same numbers, with the share of the uncut process's steps
more than 5% above its median (the machine's own spread), and the CPU's speed
then (cpu_probe before each step, probe_ms in the JSON) and its time to queue
a step, over the full steps', and the share of steps above 1.05x the full
step after the raise and among the full steps (the same process's spread).  Environment: CUT_JOBS
(gpt2, resnet50, bert, vit, convnext, effnet, swin; gpt2var: GPT-2 whose sequence length is drawn
per step from 512, 768 and 1024, the same in every process, so its steps differ), CUT_MODES (a mode
RULE+offload, e.g. planned+offload, also installs libvmem_offload's saved
tensor hooks; plain modes run without), CUT_FULL (F, 5), CUT_STEPS (C, 13: the
transition, three trial steps for each of three rules, then three under the
rule chosen), CUT_RAISED (R, 3), CUT_UNCUT (0: no uncut process), CUT_PROFILE
(1: profiler table of the last step of each cut), CUT_OFFLOAD_WINDOW_FRAC (a
study knob: the offload's windows as a fraction of the limit, default 1/32),
CUT_OFFLOAD_WINDOW_IN_FRAC (the fetch ahead's window alone, not capped at
512 MiB; a study knob), CUT_OFFLOAD_AHEAD_MIN (records the fetch ahead may
hold whatever its window, default 1; 2: double buffering; a study knob),
CUT_OFFLOAD_SPREAD (1: offload candidates spread over the pass, in the
proportion budget / offloadable, rather than the first ones; with
CUT_OFFLOAD_SPREAD_AUTO=0, else the rule below sets it at each step end),
CUT_OFFLOAD_SPREAD_AUTO (0: the rule off; on by default: the offload spreads
where the first candidates that fill the budget are well above the pass's
average size, from the last step's candidates: libvmem_offload.front_skew;
the skew is logged per step; CUT_OFFLOAD_SKEW_MIN sets the skew from which
it spreads, default 1.5),
CUT_OFFLOAD_SPREAD_LARGE (0: while spreading, every candidate counts; on by
default: candidates below the median size of the last step's largest pass
stay on the device),
CUT_OFFLOAD_DENSE (0: only contiguous saved tensors are candidates, not those
dense in another order such as channels_last, the way before),
CUT_ALT (ATTR=V1,V2: an offload attribute, budget.ATTR for its budget, set to
V1 and V2 in turn at each cut step from CUT_ALT_FROM, default 4, on; each
value's steps are summarised per cut: a within-process A/B for knobs whose
effect is per step, free of the spread between processes; CUT_ALT_PHASES,
e.g. full,raised75: in those phases instead of the cuts; hooks_always=0,1
alternates the offload's hooks pushed only while they may act and pushed
all the time),
CUT_USER_CKPT (nr or re: the program's own gradient checkpointing on the
transformers jobs, gradient_checkpointing_enable, non-reentrant or reentrant),
CUT_OFFLOAD_CHOICE (1: the offload measures both ways per limit and keeps the
faster, libvmem_offload.Choice; a study knob, needs CUT_STEPS of 24 or so),
CUT_PROFILE=1 also writes the profiled step's chrome trace to $OUT and prints
each stream's busy time (CUT_PROFILE=cpu: with the CPU's activity, the last
full step profiled too, and the compute stream's idle time split into waiting
for the CPU's launches and waiting with work queued, and the CPU's calls;
CUT_PROFILE=stack: the same with Python stacks, libvmem's functions timed;
CUT_PROFILE=py: cProfile of the last full step and of the last step of each
cut, the functions by own time and libvmem's by time with their callees),
CUT_PROFILE_AT (PHASE:K,...: profile those steps, e.g. raised50:1, instead
of each phase's last),
CUT_OFFLOAD_SKIP (0: the offload learns no skips; a study knob),
CUT_OFFLOAD_BY_SHAPE (0: one offload budget for every step shape, the way
before, instead of one per shape of the step's first saved tensors),
CUT_OFFLOAD_REGISTER (0: the offload's host buffers from PyTorch's pinned
allocator instead of registered pageable memory, the way before),
CUT_OFFLOAD_START_AT_CUT (0: a cut between steps starts the offload's budget
only at the first step end under it, the way before),
CUT_OFFLOAD_NAIVE_AT_CUT (0: when it starts the budget within a step, the
offload does not call vmem_step_naive, and the planner follows its plan for
the rest of that step, the way before),
CUT_OFFLOAD_PACE_ROOM (1: copies out paced by the room under the limit that
the last step's allocations between hook calls leave, instead of by the
window; a study knob),
CUT_OFFLOAD_FETCH_ROOM (1: the fetch ahead holds as much as the room the
rest of the backward pass leaves, learned from the last two steps, instead of
its window, 1/32 of the limit; a study knob, slower on an H100),
CUT_OFFLOAD_FAST (0: the hooks reach streams through torch.cuda's Python
functions, the way before, instead of the calls underneath them),
CUT_COMPILE (1: the model runs through torch.compile, whole; blocks: each
entry of its first ModuleList of 4 or more compiled on its own),
CUT_OFFLOAD_BULK_SKIP (0: records a backward consumes in bulk, as a compiled
model's does, are not skipped; libvmem_offload.Offload._bulk_check),
CUT_OFFLOAD_LEARN_ORDER (1: the fetch ahead follows the order the last
step unpacked its records in; a study knob),
CUT_OFFLOAD_BACKGROUND (1: the offload lets its host buffers go on a thread
of its own, not in the step end that ends the cut; a study knob),
CUT_OFFLOAD_KEEP_POOL (1: the offload keeps its host buffers pinned after a
cut instead of letting them go; a study knob),
CUT_OFFLOAD_ANON (1: the host buffers' pageable memory as anonymous mappings
of their own instead of PyTorch's CPU tensors; a study knob, slower first cut
steps on an H100),
CUT_OFFLOAD_HUGE (1: each new host buffer's pageable memory advised huge
before it is pinned; a study knob),
CUT_OFFLOAD_TRIM (0: glibc's free heap memory not given back when the buffers
are let go at a cut's end, the way before),
CUT_RAISED_SLEEP (S: seconds slept, the device idle, after the first step of
each raise, to tell what decays with time from what decays with steps),
CUT_WITHIN (k: each cut is made during the phase's first step, as the model's
repeated block k starts its forward, instead of between two steps; needs the
blocks recompute() found),
CUT_OFFLOAD_EARLY (1: each saved tensor is let go as soon as its copy out is
queued, libvmem keeping its memory until the copy is done through
vmem_record_stream, instead of the window's pacing; a study knob, slower for
GPT-2 and BERT on an H100).
Results: $OUT/cut-bench.json and a table on stdout.
"""

import argparse
import collections
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts", "gpu"))
OUT = os.environ.get("OUT") or "/tmp/vmem-cut"
GiB = 1 << 30


def log(*a):
    print(*a, flush=True)


# timm image jobs: model name, batch, channels_last, autocast type (fp16: with a GradScaler)
TIMM = {"vit": ("vit_base_patch16_224", 64, False, "bf16"),
        "convnext": ("convnext_tiny", 128, True, "fp16"),
        "effnet": ("efficientnet_b0", 128, True, "bf16"),
        "swin": ("swin_tiny_patch4_window7_224", 64, False, "bf16")}


# gpt2var: the sequence lengths, one drawn per step by its number
VAR_LENGTHS = (512, 768, 1024)


def var_length(i):
    """The sequence length of gpt2var's step i (the same in every process)."""
    return random.Random(i).choice(VAR_LENGTHS)


def build(job, torch, batch):
    nn, F = torch.nn, torch.nn.functional
    g = torch.Generator().manual_seed(1234)

    def images(b, fmt=torch.contiguous_format):
        """Two batches of b random 224x224 images and labels, and the step on them."""
        xs = [torch.randn(b, 3, 224, 224, generator=g).contiguous(memory_format=fmt)
              for _ in range(2)]
        ys = [torch.randint(0, 1000, (b,), generator=g) for _ in range(2)]

        def step_fn(m, i):
            return F.cross_entropy(m(xs[i % 2].cuda()), ys[i % 2].cuda())
        return step_fn
    if job == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(weights=None, num_classes=1000)
        step_fn = images(batch or 64)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return model, opt, step_fn, None
    if job in TIMM:
        # jobs the offload and the planner were not tuned on: timm's ViT-B/16
        # (bf16 autocast, AdamW) and ConvNeXt-Tiny (channels_last, fp16
        # autocast with a GradScaler, whose skipped steps the step hook
        # counts); EfficientNet-B0 and Swin-T, added with the offload's front
        # skew rule (spread_auto) and not tuned on either
        import timm
        name, b, last, amp = TIMM[job]
        model = timm.create_model(name, pretrained=False, num_classes=1000)
        fmt = torch.channels_last if last else torch.contiguous_format
        if last:
            model = model.to(memory_format=fmt)
        step_fn = images(batch or b, fmt)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        return model, opt, step_fn, amp
    import transformers
    if job == "gpt2var":
        # GPT-2 small whose steps differ: each step's sequence length is drawn
        # from three buckets (512, 768, 1024 tokens, batch 8) by its step
        # number, the same in every process (padding to buckets, as a job
        # with dynamic padding does); the planner was not tuned on it
        cfg = transformers.GPT2Config()
        model = transformers.GPT2LMHeadModel(cfg)
        b = batch or 8

        def var_step(m, i):
            x = torch.randint(0, cfg.vocab_size, (b, var_length(i)),
                              generator=torch.Generator().manual_seed(i)).cuda()
            return m(input_ids=x, labels=x).loss
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        return model, opt, var_step, "bf16"
    if job == "gpt2":
        cfg = transformers.GPT2Config()
        model = transformers.GPT2LMHeadModel(cfg)
        shape = (batch or 8, 1024)
    else:  # bert: BERT-base masked LM
        cfg = transformers.BertConfig()
        model = transformers.BertForMaskedLM(cfg)
        shape = (batch or 32, 512)
    toks = [torch.randint(0, cfg.vocab_size, shape, generator=g) for _ in range(2)]

    def step_fn(m, i):
        x = toks[i % 2].cuda()
        return m(input_ids=x, labels=x).loss
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    return model, opt, step_fn, "bf16"


def bandwidths(L, torch):
    """Kernel bandwidth to mapped host memory and copy bandwidth, GB/s."""
    res = {}
    n = GiB
    L.trim()
    held = L.stats()["deviceHeld"]
    L.set_limit(max(held, 64 << 20))  # nothing new fits: the block goes to host
    before = L.stats()["spilledBytes"]
    x = torch.empty(n // 4, dtype=torch.float32, device="cuda")
    res["probe_on_host"] = L.stats()["spilledBytes"] - before >= n
    torch.cuda.synchronize()
    L.set_limit(L.stats()["startCap"])
    d = torch.empty(n // 4, dtype=torch.float32, device="cuda")

    def timed(fn, reps=5):
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts)

    res["kernel_write_gbs"] = n / timed(lambda: x.fill_(1.0)) / 1e9
    res["kernel_read_gbs"] = n / timed(lambda: d.copy_(x)) / 1e9  # reads host, writes HBM
    res["kernel_read_sum_gbs"] = n / timed(lambda: x.sum()) / 1e9
    del x
    h = torch.empty(n // 4, dtype=torch.float32, pin_memory=True)
    res["copy_h2d_gbs"] = n / timed(lambda: d.copy_(h, non_blocking=True)) / 1e9
    res["copy_d2h_gbs"] = n / timed(lambda: h.copy_(d, non_blocking=True)) / 1e9
    del d, h
    return res


def stream_busy(evs):
    """Per CUDA stream of a profiler trace: the time it was busy (the union
    of its kernels, copies and memsets), their count, and the span of all."""
    per = {}
    lo, hi = None, None
    for e in evs:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        b, d = float(e["ts"]), float(e.get("dur", 0))
        per.setdefault(e.get("tid"), []).append((b, b + d, e.get("cat")))
        lo = b if lo is None else min(lo, b)
        hi = b + d if hi is None else max(hi, b + d)
    lines = ["stream busy (union of its GPU work) over the profiled step's GPU span %.1f ms:" % (
        ((hi or 0) - (lo or 0)) / 1e3)]
    for tid, iv in sorted(per.items(), key=lambda kv: -len(kv[1])):
        iv.sort()
        busy, end = 0.0, None
        for b, e, _ in iv:
            if end is None or b > end:
                busy += e - b
                end = e
            elif e > end:
                busy += e - end
                end = e
        cats = collections.Counter(c for _, _, c in iv)
        lines.append("  stream %s: busy %.1f ms, %s, first %.1f ms, last end %.1f ms" % (
            tid, busy / 1e3, ", ".join("%d %s" % (n, c) for c, n in sorted(cats.items())),
            (iv[0][0] - lo) / 1e3, (max(e for _, e, _ in iv) - lo) / 1e3))
    return "\n".join(lines)


def stream_gaps(evs):
    """Where the compute stream (the one with the most kernels) of a
    profiler trace taken with CPU activity idles, split by who it waited for:
    a gap before an operation whose launch call returned only after the
    stream went idle is the CPU's (the stream ran dry: the CPU was late by
    that much, launch latency included); the rest of a gap had the work
    queued already (waiting for another stream's event, the copies)."""
    launched = {}
    ops = collections.defaultdict(list)
    for e in evs:
        if e.get("ph") != "X":
            continue
        c, args = e.get("cat"), e.get("args") or {}
        corr = args.get("correlation")
        b, d = float(e["ts"]), float(e.get("dur", 0))
        if c in ("cuda_runtime", "cuda_driver"):
            if corr is not None:
                launched[corr] = b + d
        elif c in ("kernel", "gpu_memcpy", "gpu_memset"):
            ops[e.get("tid")].append((b, b + d, corr))
    if not ops:
        return "stream gaps: no GPU work in the trace"
    tid = max(ops, key=lambda k: len(ops[k]))
    iv = sorted(ops[tid])
    end = iv[0][1]
    cpu = queued = unknown = 0.0
    n_cpu = 0
    for b, e, corr in iv[1:]:
        gap = b - end
        if gap > 0:
            ret = launched.get(corr)
            if ret is None:
                unknown += gap
            else:
                late = min(gap, max(0.0, ret - end))
                cpu += late
                queued += gap - late
                n_cpu += late > 0
        end = max(end, e)
    span = (end - iv[0][0]) / 1e3
    return ("stream gaps: compute stream %s over %.1f ms: idle %.1f ms, of which %.1f ms waiting "
            "for the CPU to launch (%d gaps) and %.1f ms with its next work queued "
            "(other streams' events); %.1f ms unmatched" % (
                tid, span, (cpu + queued + unknown) / 1e3, cpu / 1e3, n_cpu, queued / 1e3,
                unknown / 1e3))


def cpu_calls(evs, most=10):
    """A profiler trace's CPU side: the CUDA runtime and driver calls, and
    (with Python stacks) libvmem's Python functions, by total time (Python
    functions inclusive of what they call)."""
    api = collections.defaultdict(lambda: [0, 0.0])
    py = collections.defaultdict(lambda: [0, 0.0])
    for e in evs:
        if e.get("ph") != "X":
            continue
        c = e.get("cat")
        d = float(e.get("dur", 0))
        if c in ("cuda_runtime", "cuda_driver"):
            tgt = api[e.get("name")]
        elif c == "python_function" and "libvmem" in e.get("name", ""):
            tgt = py[e.get("name").split("/")[-1]]
        else:
            continue
        tgt[0] += 1
        tgt[1] += d
    lines = ["CPU calls of the profiled step (count, total ms):"]
    for title, tab in (("CUDA API", api), ("libvmem Python", py)):
        top = sorted(tab.items(), key=lambda kv: -kv[1][1])[:most]
        if top:
            lines.append("  %s: %s" % (title, "; ".join(
                "%s %d %.1f" % (k, n, t / 1e3) for k, (n, t) in top)))
    # the longest single CUDA calls, with their thread and start (ms into the trace)
    calls = [e for e in evs if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime",
                                                                        "cuda_driver")]
    if calls:
        t0 = min(float(e["ts"]) for e in evs if e.get("ph") == "X")
        top = sorted(calls, key=lambda e: -float(e.get("dur", 0)))[:most]
        lines.append("  longest CUDA calls: %s" % "; ".join(
            "%s %.2f ms at %.1f (thread %s)" % (e.get("name"), float(e.get("dur", 0)) / 1e3,
                                                (float(e["ts"]) - t0) / 1e3, e.get("tid"))
            for e in top))
    return "\n".join(lines)


def python_profile(prof, title, most=25):
    """A cProfile of one step (CUT_PROFILE=py): the functions by their own
    time, and libvmem's by the time spent in them and what they call."""
    import io
    import pstats
    st = pstats.Stats(prof, stream=io.StringIO())
    rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])
    total = sum(v[2] for v in st.stats.values())
    lines = ["python profile %s: %.1f ms in Python functions and the C calls they make "
             "(own time, ms; calls):" % (title, total * 1e3)]
    for (fn, line, name), (_, nc, tt, ct, _) in rows[:most]:
        lines.append("  %8.2f %8.2f %6d  %s:%d %s" % (tt * 1e3, ct * 1e3, nc,
                                                     os.path.basename(fn), line, name))
    mine = sorted(((k, v) for k, v in st.stats.items() if "libvmem" in k[0]),
                  key=lambda kv: -kv[1][3])[:most]
    lines.append("  libvmem's functions by time with what they call (ms; calls):")
    for (fn, line, name), (_, nc, tt, ct, _) in mine:
        lines.append("  %8.2f %8.2f %6d  %s:%d %s" % (tt * 1e3, ct * 1e3, nc,
                                                     os.path.basename(fn), line, name))
    return "\n".join(lines)


def cpu_probe(reps=3, n=20000):
    """The CPU's speed at this moment, as the time of a fixed piece of plain
    Python (no torch, no libvmem; 1-2 ms), the least of reps runs: a step of
    a job whose forward the CPU's launches hold slows with the CPU, whatever
    the allocator does (docs/placement.md, "The rest of the slowdown after a
    raise")."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        d = {}
        for j in range(n):
            d[j & 1023] = d.get(j & 1023, 0) + j
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def worker(a):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import framework_proof as fp
    L = fp.load_libvmem()
    import libvmem_offload
    import torch
    stats_of = libvmem_offload._stats_reader(L)

    def region_counts():  # regions mapped, unmapped; device syncs, seconds waited in them
        s = stats_of(torch.cuda.current_device())
        if s is None:
            return (0, 0, 0, 0.0)
        return (s.device_region_allocs, s.device_region_frees, s.device_syncs,
                s.device_sync_seconds)
    # with the optimizer post-step hook: no step_end() below; the saved
    # tensor offload as VMEM_TORCH_OFFLOAD says (main() sets it per mode)
    # CUT_RECOMPUTE=0: no recomputation at all (install_torch's default
    # finds the model and recomputes its checked blocks while cut)
    L.install_torch(recompute=False if os.environ.get("CUT_RECOMPUTE") == "0" else None)
    # study knobs: the offload's switches (an environment value of 0 turns
    # one off, any other on), its windows, the choice, and the naive step
    switches = (("CUT_OFFLOAD_START_AT_CUT", None, "start_at_cut"),
                ("CUT_OFFLOAD_REGISTER", "pool", "register"),
                ("CUT_OFFLOAD_PACE_ROOM", None, "pace_room"),
                ("CUT_OFFLOAD_GPU_PACE", None, "gpu_pace"),
                ("CUT_OFFLOAD_EARLY", None, "early"),
                ("CUT_OFFLOAD_SM_COPY", None, "sm_copy"),
                ("CUT_OFFLOAD_OUT_PRIORITY", None, "out_priority"),
                ("CUT_OFFLOAD_SPREAD", None, "spread"),
                ("CUT_OFFLOAD_SPREAD_AUTO", None, "spread_auto"),
                ("CUT_OFFLOAD_DENSE", None, "dense_ok"),
                ("CUT_OFFLOAD_SPREAD_LARGE", None, "spread_large"),
                ("CUT_OFFLOAD_SKIP", None, "learn_skip"),
                ("CUT_OFFLOAD_BY_SHAPE", None, "by_shape"),
                ("CUT_OFFLOAD_BULK_SKIP", None, "bulk_skip"),
                ("CUT_OFFLOAD_LEARN_ORDER", None, "learn_order"),
                ("CUT_OFFLOAD_BACKGROUND", "pool", "background"),
                ("CUT_OFFLOAD_KEEP_POOL", "pool", "keep"),
                ("CUT_OFFLOAD_ANON", "pool", "anon"),
                ("CUT_OFFLOAD_TRIM", "pool", "trim"),
                ("CUT_OFFLOAD_HUGE", "pool", "huge"),
                ("CUT_OFFLOAD_FETCH_ROOM", None, "fetch_room"),
                ("CUT_OFFLOAD_FAST", "fast", "raw"))
    wf = os.environ.get("CUT_OFFLOAD_WINDOW_FRAC")
    wi = os.environ.get("CUT_OFFLOAD_WINDOW_IN_FRAC")
    choice = os.environ.get("CUT_OFFLOAD_CHOICE")
    nac = os.environ.get("CUT_OFFLOAD_NAIVE_AT_CUT")
    skew_min = os.environ.get("CUT_OFFLOAD_SKEW_MIN")
    ahead_min = os.environ.get("CUT_OFFLOAD_AHEAD_MIN")
    if (any(os.environ.get(name) for name, _, _ in switches) or wf or wi or choice or nac or
            skew_min or ahead_min) and \
            L.offload_stats().get("installed"):
        off = libvmem_offload._off
        for name, part, attr in switches:
            val = os.environ.get(name)
            if val:
                setattr(getattr(off, part) if part else off, attr, val != "0")
        if nac == "0":
            off.step_naive = None
        if choice and choice != "0":
            off.choice = libvmem_offload.Choice()
        if wf:
            off.budget.window_frac = float(wf)
        if skew_min:
            off.skew_min = float(skew_min)
        if ahead_min:
            off.ahead_min = int(ahead_min)
        if wi:
            off.budget.window_in_frac = float(wi)
            # a study of the fetch ahead's window: not capped at window_max
            off.budget.window_in_max = 1 << 40
    alt = os.environ.get("CUT_ALT")
    alt_from = int(os.environ.get("CUT_ALT_FROM") or 4)
    alt_phases = [p for p in (os.environ.get("CUT_ALT_PHASES") or "").split(",") if p]
    if alt:  # ATTR=V1,V2: an offload knob alternated per cut step
        attr, vals = alt.split("=", 1)
        alt = (attr, [float(v) for v in vals.split(",")])

    def alternate(name, frac, k):
        """CUT_ALT: the value for step k of phase name (a cut, or one of
        CUT_ALT_PHASES; from CUT_ALT_FROM on), set on the offload (budget.X:
        on its Budget, windows recomputed); None when not alternating (the
        last value set stays)."""
        if alt_phases:
            if name not in alt_phases:
                return None
        elif frac is None or frac >= 1.0:
            return None
        if not alt or k < alt_from or not L.offload_stats().get("installed"):
            return None
        attr, vals = alt
        v = vals[(k - alt_from) % len(vals)]
        obj = libvmem_offload._off
        if attr.startswith("budget."):
            obj, attr = obj.budget, attr[len("budget."):]
        setattr(obj, attr, v)
        if obj is libvmem_offload._off.budget and obj.limit:
            obj.set_limit(obj.limit)
        if attr == "hooks_always":  # pushed or popped now, for this step
            obj.update_hooks(L.get_limit())
        return v

    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    model, opt, step_fn, amp = build(a.job, torch, a.batch)
    model = model.cuda().train()
    user_ckpt = os.environ.get("CUT_USER_CKPT")
    if user_ckpt and hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": user_ckpt == "re"})
        log("the program's own gradient checkpointing: %s" % (
            "reentrant" if user_ckpt == "re" else "non-reentrant"))
    rc = None
    if os.environ.get("CUT_RECOMPUTE") and os.environ["CUT_RECOMPUTE"] != "0":
        # CUT_RECOMPUTE=auto|all (1: auto): libvmem.recompute(model), the
        # repeated blocks recomputed in the backward while cut
        pol = os.environ["CUT_RECOMPUTE"]
        rc = L.recompute(model, policy="auto" if pol == "1" else pol)
        log("recompute: %d blocks (%s), policy %s" % (
            len(rc.blocks), ", ".join(sorted(set(type(b).__name__ for b in rc.blocks))),
            rc.policy))
    run = model
    if os.environ.get("CUT_COMPILE") == "1":  # the whole model compiled (torch.compile)
        run = torch.compile(model)
    elif os.environ.get("CUT_COMPILE") == "blocks":
        # each entry of the model's first ModuleList of 4 or more (a
        # transformer's blocks) compiled on its own, the rest eager
        for mod in model.modules():
            if isinstance(mod, torch.nn.ModuleList) and len(mod) >= 4:
                for j in range(len(mod)):
                    mod[j] = torch.compile(mod[j])
                log("compiled %d blocks of %s" % (len(mod), type(mod[0]).__name__))
                break
    # fp16: a GradScaler (skipped steps end a libvmem step through the hook's
    # GradScaler wrapper); bf16: autocast alone; None: fp32
    scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
    adt = torch.float16 if amp == "fp16" else torch.bfloat16
    res = {"job": a.job, "mode": a.mode, "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "steps": []}
    phases = [("full", None, a.full)]
    if a.mode != "uncut":
        phases += [("cut75", 0.75, a.cut), ("raised75", 1.0, a.raised),
                   ("cut50", 0.5, a.cut), ("raised50", 1.0, a.raised)]
    else:
        phases += [("more", None, 2 * (a.cut + a.raised))]
    # Python's garbage collector: its runs and time per step (all threads)
    gc_clock = {"runs": 0, "ms": 0.0, "t": {}}

    def on_gc(phase, info):
        tid = threading.get_ident()
        if phase == "start":
            gc_clock["t"][tid] = time.perf_counter()
        elif tid in gc_clock["t"]:
            gc_clock["runs"] += 1
            gc_clock["ms"] += (time.perf_counter() - gc_clock["t"].pop(tid)) * 1e3
    gc.callbacks.append(on_gc)
    raised_sleep = float(os.environ.get("CUT_RAISED_SLEEP") or 0)
    within = int(os.environ.get("CUT_WITHIN") or -1)
    prof_at = set(p for p in (os.environ.get("CUT_PROFILE_AT") or "").split(",") if p)
    start = L.stats()["startCap"]
    peak = None
    i = 0
    try:
        for name, frac, n in phases:
            if frac is not None:
                if peak is None:
                    peak = L.stats()["devicePeakInUse"]
                    res["peak_in_use"] = peak
                torch.cuda.synchronize()
                lim = start if frac >= 1.0 else int(peak * frac)
                if within >= 0 and frac < 1.0 and rc is not None and within < len(rc.blocks):
                    # CUT_WITHIN: the cut comes in the phase's first step, as
                    # block `within` starts its forward (a scheduler's cut
                    # during a step), not between two steps
                    def cut_now(mod, args, lim=lim):
                        L.set_limit(lim)
                        cut_hook.pop().remove()
                    cut_hook = [rc.blocks[within].register_forward_pre_hook(cut_now)]
                else:
                    L.set_limit(lim)
                res.setdefault("limits", {})[name] = lim
            for k in range(n):
                if k == 1 and raised_sleep and name.startswith("raised"):
                    torch.cuda.synchronize()
                    time.sleep(raised_sleep)
                alt_val = alternate(name, frac, k)
                if rc is None:
                    import libvmem_recompute  # install_torch found the model itself
                    if libvmem_recompute._rc:
                        rc = libvmem_recompute._rc[0]
                        log("recompute (found by install_torch): %d blocks of %s" % (
                            len(rc.blocks), type(rc.blocks[0]).__name__ if rc.blocks else "-"))
                hooks_on = L.offload_stats().get("hooks_on")
                rc0 = rc.totals["recomputed_calls"] if rc is not None else 0
                s0 = L.stats()
                r0 = region_counts()
                gc0 = (gc_clock["runs"], gc_clock["ms"])
                torch.cuda.synchronize()
                probe_ms = cpu_probe()
                ru0 = resource.getrusage(resource.RUSAGE_SELF)
                t0 = time.perf_counter()
                prof = None
                cpu_prof = a.profile in ("cpu", "stack")
                pyprof = None
                # CUT_PROFILE_AT: the steps named there instead of each phase's last
                want = ("%s:%d" % (name, k)) in prof_at if prof_at else k == n - 1
                if a.profile == "py" and want:  # the Python side, by function
                    import cProfile
                    pyprof = cProfile.Profile()
                    pyprof.enable()
                elif a.profile and want and (prof_at or (frac is not None and frac < 1.0) or
                                             (cpu_prof and name == "full")):
                    acts = [torch.profiler.ProfilerActivity.CUDA]
                    if cpu_prof:  # the launches too: who the compute stream waits for
                        acts.append(torch.profiler.ProfilerActivity.CPU)
                    prof = torch.profiler.profile(activities=acts,
                                                  with_stack=a.profile == "stack")
                    prof.__enter__()
                # the forward and the backward (with the optimizer) as the
                # compute stream runs them: the two phases of the phase floor
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
                ev[0].record()
                with torch.autocast("cuda", dtype=adt, enabled=amp is not None):
                    loss = step_fn(run, i)
                ev[1].record()
                opt.zero_grad(set_to_none=True)
                if scaler is not None:
                    scale = scaler.get_scale()
                    scaler.scale(loss).backward()
                    scaler.step(opt)  # the hook (or its wrapper, if skipped) ends the step
                    scaler.update()
                else:
                    loss.backward()
                    opt.step()  # the hook ends the libvmem step here
                ev[2].record()
                t_cpu = time.perf_counter() - t0  # the CPU's part: all queued, nothing awaited
                if pyprof is not None:
                    pyprof.disable()
                    log(python_profile(pyprof, "%s %s %s" % (a.job, a.mode, name)))
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
                ru1 = resource.getrusage(resource.RUSAGE_SELF)  # the step's, not the profiler's
                if prof is not None:  # CUT_PROFILE=1: where the last cut step's GPU time goes
                    prof.__exit__(None, None, None)
                    log("profile %s %s %s (step %.1f ms, profiled):\n%s" % (
                        a.job, a.mode, name, dt * 1e3,
                        prof.key_averages().table(sort_by="cuda_time_total", row_limit=18,
                                                   max_name_column_width=90)))
                    path = os.path.join(OUT, "trace-%s-%s-%s%s.json" % (
                        a.job, a.mode.replace("+", "-"), name, "-%d" % k if prof_at else ""))
                    prof.export_chrome_trace(path)
                    with open(path) as f:  # read once: with the CPU's activity, tens of MB
                        evs = json.load(f).get("traceEvents", [])
                    log(stream_busy(evs))
                    if cpu_prof:
                        log(stream_gaps(evs))
                        log(cpu_calls(evs))
                s1 = L.stats()
                r1 = region_counts()

                def grew(key):
                    """A statistics counter's increase over the step (0 if absent)."""
                    return s1.get(key, 0) - s0.get(key, 0)

                rec = {"phase": name, "k": k, "i": i, "ms": dt * 1e3, "loss": loss.item(),
                       "alt": alt_val, "hooks_on": hooks_on,
                       "recomputed": (rc.totals["recomputed_calls"] - rc0
                                      if rc is not None else None),
                       "cpu_ms": t_cpu * 1e3, "probe_ms": probe_ms,
                       "gc_runs": gc_clock["runs"] - gc0[0], "gc_ms": gc_clock["ms"] - gc0[1],
                       # the process's (all threads') CPU time, user and system,
                       # page faults and context switches over the step
                       "user_ms": 1e3 * (ru1.ru_utime - ru0.ru_utime),
                       "sys_ms": 1e3 * (ru1.ru_stime - ru0.ru_stime),
                       "minflt": ru1.ru_minflt - ru0.ru_minflt,
                       "majflt": ru1.ru_majflt - ru0.ru_majflt,
                       "nvcsw": ru1.ru_nvcsw - ru0.ru_nvcsw,
                       "nivcsw": ru1.ru_nivcsw - ru0.ru_nivcsw,
                       "libvmem_steps": s1["steps"] - s0["steps"],
                       "scaler_skipped": scaler is not None and scaler.get_scale() < scale,
                       "fwd_ms": ev[0].elapsed_time(ev[1]), "bwd_ms": ev[1].elapsed_time(ev[2]),
                       "host_placed": s1["spilledBytes"] - s0["spilledBytes"],
                       "planned": s1["placedHostBytes"] - s0["placedHostBytes"],
                       "fallback": s1["fallbackBytes"] - s0["fallbackBytes"],
                       "moved_to_host": s1["movedToHostBytes"] - s0["movedToHostBytes"],
                       "moved_to_device": s1["movedToDeviceBytes"] - s0["movedToDeviceBytes"],
                       "swap_out": grew("swapOutBytes"),
                       "swap_in": grew("swapInBytes"),
                       "swap_points": grew("swapPoints"),
                       "swap_skipped": grew("swapSkipped"),
                       "regions": s1.get("deviceRegions"),
                       # regions mapped and unmapped in the step: at the limit, an
                       # allocation no free block fits makes libvmem give memory
                       # back and map it again, which waits for the device
                       "region_maps": r1[0] - r0[0], "region_unmaps": r1[1] - r0[1],
                       "syncs": r1[2] - r0[2], "sync_ms": (r1[3] - r0[3]) * 1e3,
                       "trims": grew("deviceTrims"),
                       # free memory moved to the arena's end without a wait (bfc_remap)
                       "remaps": grew("deviceRemaps"),
                       "dwaits": grew("deferredStreamWaits"),
                       "dcpu": grew("deferredCpuWaits"),
                       "dfreed": grew("deferredFreedBytes"),
                       "map_ms": 1e3 * grew("deviceMapSeconds"),
                       "unmap_ms": 1e3 * grew("deviceUnmapSeconds"),
                       "remap_ms": 1e3 * grew("deviceRemapSeconds"),
                       "split_ms": 1e3 * grew("deviceSplitSeconds"),
                       "huge_splits": grew("deviceHugeSplits"),
                       "big_splits": grew("deviceBigSplits"),
                       "remapped": grew("deviceRemappedBytes"),
                       "remap_misses": grew("deviceRemapMisses"),
                       "remap_refusals": grew("deviceRemapRefusals"),
                       "trimmed": grew("deviceTrimmedBytes"),
                       "held": s1.get("deviceHeld"),
                       "host_in_use": s1["hostInUse"], "dev_max": s1["deviceMemUsedMax"],
                       "limit": s1["limit"], "rule": s1.get("placement"),
                       # lifetimes of the blocks on host freed in this step
                       "host_freed": s1["hostFreedBytes"] - s0["hostFreedBytes"],
                       "life_events_sum": s1["hostFreedBytes"] * s1["hostLifeEvents"]
                       - s0["hostFreedBytes"] * s0["hostLifeEvents"],
                       "life_seconds_sum": s1["hostFreedBytes"] * s1["hostLifeSeconds"]
                       - s0["hostFreedBytes"] * s0["hostLifeSeconds"]}
                off = L.offload_stats()
                if off.get("installed"):
                    ls = off.get("last_step", {})
                    rec["offload"] = {k: ls.get(k, 0) for k in (
                        "offloaded", "early", "prefetched", "late", "late_no_room", "reclaimed",
                        "skipped", "bulk", "clear_s", "cleared",
                        "budget", "device_max", "host_max", "fwd_max", "pack_s", "unpack_s", "wait_s",
                        "hooks", "ex_known", "ex_max", "room_waits", "ex_miss_at", "ex_miss",
                        "spread", "choice", "skew", "ahead_max", "room_known", "bw_hooks",
                        "no_fit", "tensors", "host_pinned_new", "stop_window", "stop_room",
                        "shapes")}
                    rec["offload"]["next_budget"] = off["budget"]
                    rec["offload"]["waits_out"] = off["waits_out"]
                    rec["offload"]["waits_out_gpu"] = off.get("waits_out_gpu", 0)
                res["steps"].append(rec)
                log("%s %s %-8s %2d %8.1f ms (fwd %.1f, bwd %.1f, cpu %.1f) loss %.5f host %.2f GB (plan %.2f "
                    "fb %.2f mv %.2f) "
                    "host in use %.2f GB; %s swap out %.2f in %.2f GB at %d points, %d skipped; "
                    "%s regions (%d mapped, %d unmapped in the step; %d device syncs, %.1f ms "
                    "waited; %d remaps, %.2f GB, %d missed, %d refused), held %.2f GB; "
                    "deferred frees %.2f GB, %d stream waits, %d CPU waits; the CPU in driver "
                    "mappings: map %.1f ms, unmap %.1f ms (%d huge, %d big splits: %.1f ms), "
                    "remap %.1f ms" % (
                        a.job, a.mode, name, k, rec["ms"], rec["fwd_ms"], rec["bwd_ms"],
                        rec["cpu_ms"], rec["loss"],
                        rec["host_placed"] / 1e9,
                        rec["planned"] / 1e9, rec["fallback"] / 1e9, rec["moved_to_host"] / 1e9,
                        rec["host_in_use"] / 1e9, rec["rule"], rec["swap_out"] / 1e9,
                        rec["swap_in"] / 1e9, rec["swap_points"], rec["swap_skipped"],
                        rec["regions"], rec["region_maps"], rec["region_unmaps"],
                        rec["syncs"], rec["sync_ms"], rec["remaps"], rec["remapped"] / 1e9,
                        rec["remap_misses"], rec["remap_refusals"], (rec["held"] or 0) / 1e9,
                        rec["dfreed"] / 1e9, rec["dwaits"], rec["dcpu"], rec["map_ms"],
                        rec["unmap_ms"], rec["huge_splits"], rec["big_splits"], rec["split_ms"],
                        rec["remap_ms"]))
                if rc is not None:
                    rs = rc.stats()
                    log("    recompute: %d block calls recomputed; need %s, chosen %d, deficit "
                        "%.2f GB covered by %.2f GB; gains (GB) %s; checked %d, unsafe %s" % (
                            rec["recomputed"], rs["need"], rs["chosen"],
                            rs["last"].get("deficit", 0) / 1e9, rs["last"].get("covered", 0) / 1e9,
                            " ".join("%.2f" % (g / 1e9) if g is not None else "-"
                                     for g in rs["gains"]) if k == 0 else "...",
                            rs.get("checked", 0), rs.get("unsafe") or "none"))
                if scaler is not None or rec["libvmem_steps"] != 1:
                    log("    libvmem steps ended in this iteration: %d%s" % (
                        rec["libvmem_steps"],
                        " (the GradScaler skipped the optimizer step)"
                        if rec["scaler_skipped"] else ""))
                if "offload" in rec:
                    o = rec["offload"]
                    log("    offload: %.2f GB out (%.2f GB let go at once), %.2f GB fetched ahead, "
                        "%.2f GB late (%.2f GB "
                        "for want of room), %.2f GB "
                        "taken back before the copy out was let go, %.2f GB skipped (%.2f GB "
                        "found consumed in bulk); budget %.2f "
                        "-> %.2f GB (%d step shapes); device max %.2f GB (before backward %.2f), "
                        "host max %.2f GB; %d waits (%d on the device)" % (
                            o["offloaded"] / 1e9, o["early"] / 1e9, o["prefetched"] / 1e9,
                            o["late"] / 1e9, o["late_no_room"] / 1e9, o["reclaimed"] / 1e9, o["skipped"] / 1e9,
                            o["bulk"] / 1e9,
                            o["budget"] / 1e9, o["next_budget"] / 1e9, o.get("shapes", 0),
                            o["device_max"] / 1e9,
                            o.get("fwd_max", 0) / 1e9,
                            o["host_max"] / 1e9, o["waits_out"], o["waits_out_gpu"]))
                    if o.get("choice") or o.get("spread") or o.get("skew") or o.get("tensors"):
                        log("    choice: spread %s for the next step (front skew %.2f; this step "
                            "%d tensors out, %.2f GB pinned anew)%s" % (
                            "on" if o.get("spread") else "off", o.get("skew") or 0.0,
                            o.get("tensors", 0), o.get("host_pinned_new", 0) / 1e9,
                            "; measured median step %.1f ms first tensors, %.1f ms spread" % (
                                o["choice"][0] * 1e3, o["choice"][1] * 1e3)
                            if o.get("choice") else ""))
                    log("    hooks: pack %.1f ms, unpack %.1f ms, waits %.1f ms; Python's garbage "
                        "collector %d runs, %.1f ms; trims %d (%.2f GB); "
                        "fetch by room: room ahead known at %d of %d backward hook calls, at most "
                        "%.2f GB fetched ahead at once, %d fetches put off for want of a free block; "
                        "the fetch ahead stopped %d times at its window, %d for room" % (
                            o["pack_s"] * 1e3, o["unpack_s"] * 1e3, o["wait_s"] * 1e3,
                            rec["gc_runs"], rec["gc_ms"], rec["trims"],
                            rec["trimmed"] / 1e9, o["room_known"], o["bw_hooks"],
                            o["ahead_max"] / 1e9, o["no_fit"], o["stop_window"], o["stop_room"]))
                    if o["hooks"]:
                        log("    pace_room: %d hook calls (%d excursions known), largest "
                            "excursion %.2f GB, %d waits for room; largest miss %.2f GB at "
                            "call %d" % (o["hooks"], o["ex_known"], o["ex_max"] / 1e9,
                                         o["room_waits"], o["ex_miss"] / 1e9, o["ex_miss_at"]))
                i += 1
            alt_steps = [s for s in res["steps"] if s["phase"] == name and s.get("alt") is not None]
            if alt_steps:  # CUT_ALT: each value's steps in this cut
                parts = []
                for v in alt[1]:
                    vs = [s for s in alt_steps if s["alt"] == v]
                    if vs:
                        parts.append("%s=%g: %d steps, median %.1f ms (fwd %.1f, bwd %.1f), "
                                     "each %s" % (
                                         alt[0], v, len(vs),
                                         statistics.median(s["ms"] for s in vs),
                                         statistics.median(s["fwd_ms"] for s in vs),
                                         statistics.median(s["bwd_ms"] for s in vs),
                                         " ".join("%.1f" % s["ms"] for s in vs)))
                log("alternate %s %s %s: %s" % (a.job, a.mode, name, "; ".join(parts)))
        if a.bandwidth:
            res["bandwidth"] = bandwidths(L, torch)
            log("bandwidth", res["bandwidth"])
        res["ok"] = True
    except Exception as e:
        res["ok"] = False
        res["error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
        log("error", res["error"])
    res["final_stats"] = L.stats()
    with open(a.result, "w") as f:
        json.dump(res, f)
    return 0


def summarise(results):
    bw = next((r["bandwidth"] for r in results if r.get("bandwidth")), None)
    rows = []
    for r in results:
        if r["mode"] == "uncut" or not r.get("ok"):
            continue
        st = r["steps"]
        # the full step: the second half of the full steps (at least from
        # the third on): GPT-2's first steps were still 20% slower in one
        # H100 run (cut-bench-raise6: 92.6 ms full, 77 ms after the raise)
        nfull = sum(1 for s in st if s["phase"] == "full")
        fulls = [s for s in st if s["phase"] == "full" and s["k"] >= max(2, nfull // 2)]
        full = statistics.median(s["ms"] for s in fulls)
        fwd = statistics.median(s.get("fwd_ms", 0) for s in fulls)
        bwd = statistics.median(s.get("bwd_ms", 0) for s in fulls)
        # the machine's step-to-step spread in the same process: the share of
        # the full steps (from the second) above 1.05x the full step, and the
        # CPU's speed (cpu_probe) and time to queue a step in the full steps,
        # which the steps after each raise are read against
        fs = [s for s in st if s["phase"] == "full" and s["k"] >= 1]
        full_share = sum(s["ms"] > 1.05 * full for s in fs) / max(1, len(fs))
        probed = all("probe_ms" in s for s in st)
        if probed:
            full_probe = statistics.median(s["probe_ms"] for s in fulls)
            full_cpu = statistics.median(s["cpu_ms"] for s in fulls)
        ref = next((u for u in results if u["job"] == r["job"] and u["mode"] == "uncut"), None)
        for cut, raised in (("cut75", "raised75"), ("cut50", "raised50")):
            ph = [s for s in st if s["phase"] == cut]
            # planned: the first steps after a cut try the rules (placement.c:
            # a transition, then three steps per rule); the last three run on
            # the chosen one
            tail = ph[-3:]
            ms = statistics.median(s["ms"] for s in tail)
            lim = r["limits"][cut]
            excess = max(r["peak_in_use"] - lim, 0)
            row = {"job": r["job"], "mode": r["mode"], "cut": cut, "full_ms": full, "cut_ms": ms,
                   "slowdown": ms / full, "peak_in_use": r["peak_in_use"], "limit": lim,
                   "host_bytes_per_step": statistics.median(s["host_placed"] + s["moved_to_host"]
                                                            for s in tail) if tail else None,
                   "swap_out_per_step": statistics.median(s.get("swap_out", 0) for s in tail) if tail else 0,
                   "rule": ph[-1].get("rule"),
                   "host_life_events": (sum(s["life_events_sum"] for s in tail) /
                                        max(1, sum(s["host_freed"] for s in tail))),
                   "host_life_ms": 1e3 * (sum(s["life_seconds_sum"] for s in tail) /
                                          max(1, sum(s["host_freed"] for s in tail))),
                   "first_cut_steps_ms": [round(s["ms"], 1) for s in ph[:4]],
                   # what the cut costs once: the first four steps' time over
                   # the settled cut step, and the pack hooks' part of it
                   # (pinning the offload's host buffers)
                   "cut_transition_ms": sum(max(0.0, s["ms"] - ms) for s in ph[:4]),
                   "cut_transition_pack_ms": sum(s.get("offload", {}).get("pack_s", 0) * 1e3
                                                 for s in ph[:4])}
            if bw:
                kbw = bw["kernel_read_gbs"] * 1e9
                row["zero_copy_floor_ms"] = full + 2 * excess / kbw * 1e3
                cbw = min(bw["copy_h2d_gbs"], bw["copy_d2h_gbs"]) * 1e9
                row["overlap_floor_ms"] = max(full, excess / cbw * 1e3)
                row["vs_zero_copy_floor"] = ms / row["zero_copy_floor_ms"]
                # the phase floor (docs/placement.md): the excess lies on host
                # at the step's peak, so it left the device before the peak
                # and comes back after it, each direction in its own phase
                out_ms = excess / (bw["copy_d2h_gbs"] * 1e9) * 1e3
                in_ms = excess / (bw["copy_h2d_gbs"] * 1e9) * 1e3
                row["link_floor_ms"] = max(full, out_ms + in_ms)
                row["phase_floor_ms"] = max(fwd, out_ms) + max(full - fwd, in_ms)
                row["vs_phase_floor"] = ms / row["phase_floor_ms"]
            row["full_fwd_ms"], row["full_bwd_ms"] = fwd, bwd
            row["cut_fwd_ms"] = statistics.median(s.get("fwd_ms", 0) for s in tail)
            row["cut_bwd_ms"] = statistics.median(s.get("bwd_ms", 0) for s in tail)
            row["overlap_target_ms"] = full * (1.5 if cut == "cut75" else 3.0)
            rs = [s for s in st if s["phase"] == raised]
            if rs:
                row["raised_first_step_ms"] = rs[0]["ms"]
            if len(rs) > 1:
                row["raised_second_step_ms"] = rs[1]["ms"]
                row["raised_vs_full"] = rs[1]["ms"] / full
                # one step is one sample: the median of every step from the
                # second on says whether a slower second step is the rule
                row["raised_steps_ms"] = [round(s["ms"], 1) for s in rs]
                row["raised_median_from_second_vs_full"] = (
                    statistics.median(s["ms"] for s in rs[1:]) / full)
                row["host_in_use_after_raise"] = rs[-1]["host_in_use"]
                # the same from the second step after the raise: a job whose
                # launches hold its forward slows with the CPU
                row["full_share_over_5pct"] = full_share
                row["raised_share_over_5pct"] = sum(s["ms"] > 1.05 * full for s in rs[1:]) / len(rs[1:])
                if probed:
                    row["raised_probe_vs_full"] = (
                        statistics.median(s["probe_ms"] for s in rs[1:]) / full_probe)
                    row["raised_cpu_vs_full"] = (
                        statistics.median(s["cpu_ms"] for s in rs[1:]) / full_cpu)
            if ref and len(rs) > 1:
                # the same step numbers in the uncut process (same seed and
                # data): a reference taken at the same point of training, and
                # that process's own spread, the noise the 5% target sits in
                at = {s["i"]: s["ms"] for s in ref["steps"]}
                pairs = [s["ms"] / at[s["i"]] for s in rs[1:] if s["i"] in at]
                if pairs:
                    row["raised_median_from_second_vs_uncut"] = statistics.median(pairs)
                later = [s["ms"] for s in ref["steps"] if s["phase"] != "full"]
                if later:
                    m = statistics.median(later)
                    row["uncut_share_over_5pct"] = sum(x > 1.05 * m for x in later) / len(later)
            if ref:
                mine = [s["loss"] for s in st]
                theirs = [s["loss"] for s in ref["steps"]][:len(mine)]
                row["losses_bitwise_equal"] = mine == theirs
                row["max_loss_diff"] = max(abs(x - y) for x, y in zip(mine, theirs))
            rows.append(row)
    return bw, rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", action="store_true")
    p.add_argument("--jobs", default=os.environ.get("CUT_JOBS", "gpt2,resnet50,bert"))
    p.add_argument("--modes", default=os.environ.get("CUT_MODES", "naive,planned"),
                   help="VMEM_PLACEMENT values: naive, planned, farthest, largest, swap; "
                        "RULE+offload adds the saved tensor offload (VMEM_TORCH_OFFLOAD=1)")
    p.add_argument("--job")
    p.add_argument("--mode")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--full", type=int, default=int(os.environ.get("CUT_FULL", "5")))
    p.add_argument("--cut", type=int, default=int(os.environ.get("CUT_STEPS", "13")))
    p.add_argument("--raised", type=int, default=int(os.environ.get("CUT_RAISED", "3")))
    p.add_argument("--bandwidth", action="store_true")
    p.add_argument("--profile", nargs="?", const="1",
                   default=os.environ.get("CUT_PROFILE", "0").strip() or "0",
                   help="profile the last step of each cut (CUT_PROFILE=1); cpu: with the "
                        "CPU's activity, the last full step too, and the compute stream's "
                        "gaps split by who it waited for")
    p.add_argument("--result")
    p.add_argument("--timeout", type=int, default=300)
    a = p.parse_args()
    if a.profile in ("0", ""):
        a.profile = None
    if a.worker:
        return worker(a)
    os.makedirs(OUT, exist_ok=True)
    results = []
    first = True
    for job in a.jobs.split(","):
        uncut = ["uncut"] if os.environ.get("CUT_UNCUT", "1") != "0" else []
        for mode in a.modes.split(",") + uncut:
            out = os.path.join(OUT, "cut-%s-%s.json" % (job, mode.replace("+", "-")))
            # "RULE+offload": VMEM_PLACEMENT=RULE with the saved tensor
            # offload (libvmem_offload); a plain RULE runs without it
            rule, _, extra = mode.partition("+")
            env = dict(os.environ, VMEM_PLACEMENT="planned" if mode == "uncut" else rule,
                       VMEM_TORCH_OFFLOAD="1" if extra == "offload" else "0")
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--job", job, "--mode", mode,
                   "--full", str(a.full), "--cut", str(a.cut), "--raised", str(a.raised),
                   "--result", out] + (["--batch", str(a.batch)] if a.batch else [])
            if first and mode != "uncut":
                cmd.append("--bandwidth")
                first = False
            log("== %s %s" % (job, mode))
            try:
                subprocess.run(cmd, env=env, timeout=a.timeout)
            except subprocess.TimeoutExpired:
                log("timeout: %s %s" % (job, mode))
            if os.path.exists(out):
                with open(out) as f:
                    results.append(json.load(f))
    bw, rows = summarise(results)
    with open(os.path.join(OUT, "cut-bench.json"), "w") as f:
        json.dump({"bandwidth": bw, "rows": rows, "runs": results}, f, indent=1)
    log("\nbandwidth (GB/s):", json.dumps(bw))
    log("%-9s %-8s %-8s %-6s %8s %9s %7s %10s %8s %9s %8s %6s" % (
        "job", "mode", "rule", "cut", "full ms", "cut ms", "x full", "zc floor", "x zc", "ov floor",
        "raised2", "losses"))
    for r in rows:
        log("%-9s %-8s %-8s %-6s %8.1f %9.1f %7.2f %10.1f %8.2f %9.1f %8.2f %6s" % (
            r["job"], r["mode"], r.get("rule") or "-", r["cut"], r["full_ms"], r["cut_ms"], r["slowdown"],
            r.get("zero_copy_floor_ms", float("nan")), r.get("vs_zero_copy_floor", float("nan")),
            r.get("overlap_floor_ms", float("nan")), r.get("raised_vs_full", float("nan")),
            r.get("losses_bitwise_equal")))
    log("\nphases (compute stream, ms): full fwd/bwd, cut fwd/bwd; the phase floor "
        "max(fwd, excess/d2h) + max(full - fwd, excess/h2d), the link floor max(full, "
        "excess/d2h + excess/h2d), and the overlap target (1.5x / 3x full) against them:")
    for r in rows:
        if "phase_floor_ms" in r:
            t = r["overlap_target_ms"]
            log("%-9s %-8s %-6s full %5.1f/%5.1f cut %6.1f/%6.1f  phase floor %6.1f (x%.2f)  "
                "link floor %6.1f  target %6.1f %s" % (
                    r["job"], r["mode"], r["cut"], r["full_fwd_ms"], r["full_bwd_ms"],
                    r["cut_fwd_ms"], r["cut_bwd_ms"], r["phase_floor_ms"], r["vs_phase_floor"],
                    r["link_floor_ms"], t,
                    "below the phase floor" if t < r["phase_floor_ms"] else "reachable"))
    log("\nwhat a cut costs once: its first four steps (ms), their time over the settled cut "
        "step and the pack hooks' part of it (pinning host buffers), and the first step after "
        "the raise:")
    for r in rows:
        log("%-9s %-8s %-6s %s  over the settled step %7.1f ms (pack hooks %7.1f ms)  first "
            "raised step %7.1f ms" % (
                r["job"], r["mode"], r["cut"], r["first_cut_steps_ms"], r["cut_transition_ms"],
                r["cut_transition_pack_ms"], r.get("raised_first_step_ms", float("nan"))))
    log("\nafter each raise: every step's ms, and the median from the second step on over the "
        "full step; with an uncut process, the median over the uncut steps of the same numbers, "
        "and the share of that process's steps after its full ones above 1.05x their median; "
        "the share of steps above 1.05x the full step after the raise and among the full steps "
        "(from the second), the CPU's speed (cpu_probe, plain Python between steps) and its time "
        "to queue a step, "
        "the medians from the second step over the full steps':")
    for r in rows:
        if "raised_steps_ms" in r:
            paired = ""
            if "raised_median_from_second_vs_uncut" in r:
                paired = "  vs uncut: %.3f  uncut steps > 1.05x: %.0f%%" % (
                    r["raised_median_from_second_vs_uncut"], 100 * r["uncut_share_over_5pct"])
            if "full_share_over_5pct" in r:
                paired += "  steps > 1.05x full: %.0f%% after the raise, %.0f%% of the full ones" % (
                    100 * r["raised_share_over_5pct"], 100 * r["full_share_over_5pct"])
            if "raised_probe_vs_full" in r:
                paired += "  CPU probe / queueing over the full steps': %.3f / %.3f" % (
                    r["raised_probe_vs_full"], r["raised_cpu_vs_full"])
            log("%-9s %-8s %-6s %s  median from the second: %.3f%s" % (
                r["job"], r["mode"], r["cut"], r["raised_steps_ms"],
                r["raised_median_from_second_vs_full"], paired))
    log("\nhost bytes per step (of them swapped out and back) and the lifetime of the blocks on host "
        "(bytes-weighted, last three steps of each cut):")
    for r in rows:
        log("%-9s %-8s %-6s %6.2f GB (swap %5.2f)  %8.0f events  %8.1f ms" % (
            r["job"], r["mode"], r["cut"], (r["host_bytes_per_step"] or 0) / 1e9,
            (r.get("swap_out_per_step") or 0) / 1e9, r["host_life_events"], r["host_life_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
