#!/usr/bin/env python3
"""One training job on libvmem, for the two-jobs-on-one-GPU example
(docs/kubernetes.md#two-jobs-on-one-gpu).

    job.py --mode torch --name hp  --phases 32:40,96:40,192:40   # a growing job
    job.py --mode torch --name opp --batch 64 --stop-file DONE   # runs until DONE exists

libvmem comes from the environment the launcher sets: VMEM_CONTROL_FILE (the
job's control file, which the scheduler writes with vmemctl) and
VMEM_STATS_FILE (written at every step end, which the scheduler reads).

--mode torch: a real PyTorch training loop (torchvision ResNet, random
images, SGD, bf16 autocast) with libvmem as PyTorch's allocator
(libvmem.install_torch(step_hook=False)); each step ends with
torch.cuda.synchronize() and libvmem.step_end(), the step boundary where
control changes take effect.  The job ends exactly one libvmem step per
training step and checks it: a second step end inside the training step (the
optimizer hook install_torch() adds by default) would make the statistics
describe the stretch between the two, whose peak is the weights and optimizer
state only (the first GPU run of this example measured that).

--mode sim: the same loop shape on libvmem's simulated device (no GPU, no
PyTorch; for CI): per step, activations of ACT_BYTES_PER_SAMPLE * batch bytes
in 16 MiB blocks on top of WEIGHT_BYTES kept live (and OPT_STATE_BYTES, made
among the first step's activations, as an optimizer's state is), then a sleep standing for
the compute (SIM_MS_PER_SAMPLE per sample), ten times as long for the share of
the step's bytes that landed in host memory, as spilled steps are on a GPU.

--ready-file / --start-file: the job touches the first once past its start-up
(imports, the model built on the CPU, the CUDA context) and waits for the
second before it puts the model on the device and runs its first step, so that
the launcher starts the clock with both jobs past their start-up, and a job's
weights land under the limit in force when it starts, not the one before.

Each step appends one JSON line to --log: time, phase, batch, step seconds,
device and host bytes in use (max during the step), the limit in force.
"""
import argparse
import ctypes
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import libvmem  # noqa: E402

MiB = 1 << 20
ACT_BYTES_PER_SAMPLE = 24 * MiB   # sim mode: activations per sample
WEIGHT_BYTES = 128 * MiB          # sim mode: weights
OPT_STATE_BYTES = 128 * MiB       # sim mode: optimizer state, made at the first step
SIM_MS_PER_SAMPLE = 0.5           # sim mode: compute per sample
BLOCK = 16 * MiB


def parse_phases(text):
    """"32:40,96:40" -> [(32, 40), (96, 40)] (batch, steps)."""
    out = []
    for part in text.split(","):
        b, s = part.split(":")
        out.append((int(b), int(s)))
    return out


class TorchWork:
    """__init__: imports, the model on the CPU, the CUDA context (no device
    memory yet); start(): the model and optimizer on the device, under the
    limit in force then."""

    def __init__(self, model_name, image_size):
        # one libvmem step per training step, ended below after the
        # synchronize: not also by the optimizer hook (see the module text)
        libvmem.install_torch(step_hook=False)
        import torch
        import torchvision
        self.torch = torch
        torch.backends.cudnn.benchmark = False
        torch.cuda.init()
        self.model = getattr(torchvision.models, model_name)(num_classes=1000)
        self.size = image_size
        self.data = {}

    def start(self):
        torch = self.torch
        self.model = self.model.cuda().to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def step(self, batch):
        torch = self.torch
        if batch not in self.data:  # one random batch per size, made once
            g = torch.Generator(device="cuda").manual_seed(batch)
            x = torch.randn(batch, 3, self.size, self.size, device="cuda", generator=g)
            y = torch.randint(0, 1000, (batch,), device="cuda", generator=g)
            self.data = {batch: (x.contiguous(memory_format=torch.channels_last), y)}
        x, y = self.data[batch]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        torch.cuda.synchronize()  # the step's work is done before vmem_step_end
        return loss.detach().item()


class SimWork:
    def __init__(self):
        self.lib = libvmem.load()
        v = ctypes.c_void_p()
        st = self.lib.vmem_instance_ex(0, ctypes.byref(v))
        if st != 0:
            raise libvmem.VmemError(st, "instance")
        self.v = v

    def start(self):
        self.weights = self.alloc(WEIGHT_BYTES)

    def alloc(self, nbytes):
        blocks = []
        for _ in range(max(1, nbytes // BLOCK)):
            p = self.lib.vmem_alloc_stream(self.v, BLOCK, None)
            if not p:
                raise MemoryError("vmem_alloc failed (status %d)" % self.lib.vmem_last_status())
            blocks.append(p)
        return blocks

    def step(self, batch):
        act = batch * ACT_BYTES_PER_SAMPLE
        if not hasattr(self, "state"):
            # the optimizer state, made at the first step (as Adam's is) among
            # the activations: live blocks spread over the arena, as on a GPU
            blocks = []
            self.state = []
            for _ in range(max(1, OPT_STATE_BYTES // BLOCK)):
                blocks += self.alloc(act // max(1, OPT_STATE_BYTES // BLOCK))
                self.state += self.alloc(BLOCK)
        else:
            blocks = self.alloc(act)
        host = libvmem.stats()["hostInUse"]
        total = (len(blocks) * BLOCK) + WEIGHT_BYTES + OPT_STATE_BYTES
        frac = min(1.0, host / total) if total else 0.0
        time.sleep(batch * SIM_MS_PER_SAMPLE * 1e-3 * (1 + 9 * frac))
        for p in blocks:
            self.lib.vmem_free_stream(self.v, p, None)
        return 0.0


class StepCountError(RuntimeError):
    pass


def run(work, phases, out, stop_file=None, max_seconds=0):
    """The training loop: work.step(batch) per step, then libvmem.step_end()
    and one JSON line to out.  Raises StepCountError when libvmem counted
    other than one step per training step (something else ends steps too:
    the statistics would not be those of the training step).
    Returns (steps, start time)."""
    t0 = time.time()
    step = 0
    base = None
    for phase, (batch, nsteps) in enumerate(phases):
        n = 0
        while nsteps == 0 or n < nsteps:
            if stop_file and os.path.exists(stop_file):
                return step, t0
            if max_seconds and time.time() - t0 > max_seconds:
                return step, t0
            if base is None:
                base = libvmem.stats()["steps"]
            s0 = time.perf_counter()
            loss = work.step(batch)
            s1 = time.perf_counter()
            libvmem.step_end()  # control changes apply here; may pace or suspend
            st = libvmem.stats()
            if st["steps"] != base + step + 1:
                raise StepCountError(
                    "libvmem counted %d steps for %d training steps: something else "
                    "calls step_end (libvmem.install_torch(step_hook=False) here)" %
                    (st["steps"] - base, step + 1))
            out.write(json.dumps({
                "t": time.time() - t0, "wall": time.time(), "step": step, "phase": phase,
                "batch": batch, "step_s": s1 - s0, "loss": loss,
                "dev_max": st["deviceMemUsedMax"], "host_max": st["hostMemUsedMax"],
                "held": st["deviceHeld"], "limit": st["limit"], "perf": st["perf"],
                "spilled": st["spilledBytes"], "failures": st["failures"]}) + "\n")
            out.flush()
            step += 1
            n += 1
    return step, t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["torch", "sim"], default="torch")
    ap.add_argument("--name", required=True)
    ap.add_argument("--phases", help="BATCH:STEPS,... (the job ends after the last)")
    ap.add_argument("--batch", type=int, help="one batch size, until --stop-file or --steps")
    ap.add_argument("--steps", type=int, default=0, help="with --batch: stop after N steps")
    ap.add_argument("--stop-file", help="with --batch: stop once this file exists")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--image-size", type=int, default=160)
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop after this long even if phases remain (0: no cap)")
    ap.add_argument("--ready-file", help="touched once the model is built")
    ap.add_argument("--start-file", help="the first step waits for this file")
    ap.add_argument("--log", required=True, help="JSON lines, one per step")
    a = ap.parse_args()
    if bool(a.phases) == bool(a.batch):
        ap.error("give --phases or --batch")
    phases = parse_phases(a.phases) if a.phases else [(a.batch, a.steps)]

    work = TorchWork(a.model, a.image_size) if a.mode == "torch" else SimWork()
    if a.ready_file:
        open(a.ready_file, "w").close()
    if a.start_file:
        while not os.path.exists(a.start_file):
            if a.stop_file and os.path.exists(a.stop_file):
                print("%s: stopped before its first step" % a.name, flush=True)
                return
            time.sleep(0.01)
    work.start()
    with open(a.log, "w") as out:
        step, t0 = run(work, phases, out, a.stop_file, a.max_seconds)
    print("%s: %d steps in %.1f s" % (a.name, step, time.time() - t0), flush=True)


if __name__ == "__main__":
    main()
