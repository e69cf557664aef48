"""Record a PyTorch job's allocations as a libvmem trace, and replay it
without a GPU: "what limit can my job run in on libvmem, what would it spill".

From a snapshot PyTorch users already take:

    torch.cuda.memory._record_memory_history(context=None)   # before the job
    ...                                                        # the job
    torch.cuda.memory._dump_snapshot("job.pickle")

    vmem-snapshot2trace job.pickle -o job.txt.gz      # or python3 -m libvmem_trace
    vmem-replay --find-min-limit job.txt.gz           # on any machine, no GPU

or recorded live, with the step boundaries:

    import libvmem_trace
    with libvmem_trace.record("job.txt.gz", workload="my-cnn") as rec:
        for batch in loader:
            train_step(batch)
            rec.step()

The trace format is the one vmem-replay reads (bench/trace.h,
docs/benchmarks.md): line 1 is '# ' and a JSON description, then

    a <id> <size> <stream> <t_us>     allocation (bytes requested)
    f <id> <t_us>                     free
    s <t_us>                          step boundary (record() writes one per step())

Conversion of the snapshot's device_traces: 'alloc' entries become 'a'
lines, 'free_completed' entries (the moment the caching allocator could
reuse the block; --free-at requested takes 'free_requested' instead) become
'f' lines; segment and other entries are counted and dropped.  Streams are
numbered in order of first use (the default stream stays 0); times are
PyTorch's own microsecond stamps.  PyTorch keeps a bounded history
(max_entries): a free of a block allocated before the history starts is
dropped and counted ("unknown_frees" in the header), and a block whose
address is handed out again without a recorded free gets a free at that
moment ("implied_frees").

Snapshots are pickles; load_snapshot() unpickles plain Python data only and
refuses anything else, so a foreign file cannot run code.
"""

import argparse
import gzip
import io
import json
import os
import pickle
import sys
import time

__all__ = ["load_snapshot", "convert", "insert_steps", "write_trace", "record", "main"]


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            "snapshot refers to %s.%s: only plain data (dicts, lists, numbers, strings) "
            "is accepted" % (module, name))


def load_snapshot(path):
    """A snapshot from torch.cuda.memory._dump_snapshot (pickle) or saved as
    JSON; gzip-compressed files are accepted too.  Raises ValueError for a
    file that is not a snapshot."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data[:1] in (b"{", b"["):
        snap = json.loads(data.decode())
    else:
        try:
            snap = _PlainUnpickler(io.BytesIO(data)).load()
        except (pickle.UnpicklingError, EOFError, ValueError) as e:
            raise ValueError("%s: not a PyTorch memory snapshot: %s" % (path, e)) from e
    if not isinstance(snap, dict) or "device_traces" not in snap:
        raise ValueError("%s: not a PyTorch memory snapshot (no 'device_traces'; was "
                         "torch.cuda.memory._record_memory_history() called before the job?)"
                         % path)
    return snap


def _pick_device(traces, device):
    if device is not None:
        if not 0 <= device < len(traces):
            raise ValueError("device %d: the snapshot has traces of %d device(s)"
                             % (device, len(traces)))
        return device
    counts = [sum(1 for e in t if e.get("action") == "alloc") for t in traces]
    if not counts or max(counts) == 0:
        raise ValueError("the snapshot has no allocation events (was "
                         "torch.cuda.memory._record_memory_history() called before the job?)")
    return counts.index(max(counts))


def convert(snapshot, device=None, free_at="completed"):
    """Turns a snapshot dict into (lines, info): the trace's event lines
    (without the header) and a dict of counts for the header."""
    if free_at not in ("completed", "requested"):
        raise ValueError("free_at must be 'completed' or 'requested'")
    traces = snapshot.get("device_traces") or []
    dev = _pick_device(traces, device)
    free_action = "free_" + free_at
    live = {}        # addr -> (id, size)
    streams = {0: 0}
    lines = []
    counts = {"allocs": 0, "frees": 0, "unknown_frees": 0, "implied_frees": 0,
              "zero_size": 0, "other_events": 0}
    next_id = 0
    in_use = peak = 0
    last_t = 0
    for e in traces[dev]:
        action = e.get("action")
        t = e.get("time_us")
        t = last_t if t is None else max(int(t), 0)
        last_t = t
        addr = e.get("addr")
        if action == "alloc":
            size = int(e.get("size", 0))
            if size <= 0:
                counts["zero_size"] += 1
                continue
            if addr in live:
                old, osize = live.pop(addr)
                lines.append("f %d %d" % (old, t))
                counts["implied_frees"] += 1
                in_use -= osize
            sid = streams.setdefault(int(e.get("stream", 0)), len(streams))
            live[addr] = (next_id, size)
            lines.append("a %d %d %d %d" % (next_id, size, sid, t))
            next_id += 1
            counts["allocs"] += 1
            in_use += size
            peak = max(peak, in_use)
        elif action == free_action or action == "free":
            if addr not in live:
                counts["unknown_frees"] += 1
                continue
            bid, size = live.pop(addr)
            lines.append("f %d %d" % (bid, t))
            counts["frees"] += 1
            in_use -= size
        else:
            counts["other_events"] += 1
    if counts["allocs"] == 0:
        raise ValueError("device %d: no allocation events in the snapshot" % dev)
    info = {"device": dev, "peak_live": peak, "streams": len(streams),
            "live_at_end": len(live)}
    info.update(counts)
    return lines, info


def insert_steps(lines, steps_us):
    """Adds a step boundary line 's <t_us>' for each time in steps_us (sorted)
    after the last event at or before it; boundaries before the first event
    or after the last one are left out."""
    out, i = [], 0
    steps = sorted(steps_us)
    times = [int(l.rsplit(" ", 1)[1]) for l in lines]
    for line, t in zip(lines, times):
        while i < len(steps) and steps[i] < t:
            if out:
                out.append("s %d" % steps[i])
            i += 1
        out.append(line)
    return out


def write_trace(path, lines, header):
    """Writes header (a dict) and the event lines as a gzip trace (or plain
    text when path does not end in .gz).  The gzip stream carries no time
    stamp, so the same input gives the same bytes."""
    text = "# " + json.dumps(header, sort_keys=True) + "\n" + "\n".join(lines) + "\n"
    if path.endswith(".gz"):
        with open(path, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as f:
                f.write(text.encode())
    else:
        with open(path, "w") as f:
            f.write(text)


class record:
    """Context manager: records the CUDA allocations of the block it wraps
    with PyTorch's memory history and writes them as a trace on exit.
    step() marks the end of a training step; the step times go into the
    header ("step_t_us") with "iters" and "step_s".  On an exception inside
    the block nothing is written.  Needs PyTorch with CUDA."""

    def __init__(self, path, workload=None, device=None, max_entries=None, free_at="completed"):
        self.path = path
        self.workload = workload
        self.device = device
        self.max_entries = max_entries
        self.free_at = free_at
        self.steps = []
        self.info = None

    def __enter__(self):
        import torch
        self._torch = torch
        kw = {"context": None}
        if self.max_entries:
            kw["max_entries"] = self.max_entries
        torch.cuda.memory._record_memory_history(**kw)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.steps.append(time.time_ns() // 1000)
        return self

    def step(self):
        """Marks the end of a step (after the optimizer step)."""
        self._torch.cuda.synchronize(self.device)
        self.steps.append(time.time_ns() // 1000)

    def __exit__(self, exc_type, exc, tb):
        torch = self._torch
        try:
            if exc_type is not None:
                return False
            torch.cuda.synchronize(self.device)
            snap = torch.cuda.memory._snapshot()
            dev = torch.cuda.current_device() if self.device is None else self.device
            lines, info = convert(snap, device=dev, free_at=self.free_at)
            durations = [b - a for a, b in zip(self.steps, self.steps[1:])]
            header = {
                "workload": self.workload or "unnamed",
                "source": "libvmem_trace.record",
                "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name(dev),
                "iters": len(durations),
                "step_s": (sorted(durations)[len(durations) // 2] / 1e6) if durations else None,
                "step_t_us": self.steps,
                "peak_allocated": torch.cuda.max_memory_allocated(dev),
                "peak_reserved": torch.cuda.max_memory_reserved(dev),
            }
            header.update(info)
            # a step boundary after each step() (the first entry is the start)
            write_trace(self.path, insert_steps(lines, self.steps[1:]), header)
            self.info = header
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
        return False


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="vmem-snapshot2trace",
        description="Converts a PyTorch CUDA memory snapshot (torch.cuda.memory._dump_snapshot, "
                    "recorded with _record_memory_history) into a libvmem trace for vmem-replay.",
        epilog="exit status: 0 written, 1 the input is not a usable snapshot or the output "
               "cannot be written, 2 bad arguments")
    ap.add_argument("snapshot", help="the snapshot file (.pickle, or JSON; may be gzip)")
    ap.add_argument("-o", "--output", help="trace to write (default: SNAPSHOT with .txt.gz)")
    ap.add_argument("--device", type=int, help="device whose events to take (default: the one "
                    "with the most allocations)")
    ap.add_argument("--workload", help="name for the header (default: the file's name)")
    ap.add_argument("--free-at", choices=("completed", "requested"), default="completed",
                    help="which of PyTorch's free events ends a block (default: completed)")
    args = ap.parse_args(argv)
    out = args.output
    if not out:
        base = os.path.basename(args.snapshot)
        for ext in (".gz", ".pickle", ".pkl", ".json"):
            if base.endswith(ext):
                base = base[: -len(ext)]
        out = os.path.join(os.path.dirname(args.snapshot), base + ".txt.gz")
    try:
        snap = load_snapshot(args.snapshot)
        lines, info = convert(snap, device=args.device, free_at=args.free_at)
        header = {"workload": args.workload or os.path.basename(args.snapshot),
                  "source": "torch.cuda.memory snapshot"}
        header.update(info)
        write_trace(out, lines, header)
    except (OSError, ValueError) as e:
        print("vmem-snapshot2trace: %s" % e, file=sys.stderr)
        return 1
    print("vmem-snapshot2trace: %s: %d allocations, %d frees, peak live %.1f MiB, device %d%s"
          % (out, info["allocs"], info["frees"], info["peak_live"] / 2**20, info["device"],
             "; %d frees of blocks allocated before the history started were dropped"
             % info["unknown_frees"] if info["unknown_frees"] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
