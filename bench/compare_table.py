#!/usr/bin/env python3
"""Turns the JSON lines of bench/compare-gpu.sh into the markdown table of
docs/benchmarks.md (between the gpu-compare markers).

    compare_table.py RESULTS.jsonl --meta META.json [--write docs/benchmarks.md]
                     [--markdown OUT.md]

RESULTS.jsonl holds one JSON object per line, as printed by vmem-replay
(key "backend") or by torch-replay / cuda-replay (key "allocator"); lines
that are not JSON objects are skipped.  META.json: {"date", "gpu", "command",
"notes": [...]}.  Prints the table; --write replaces the part of the file
between the markers (appending a section with them if they are missing).
"""
import argparse
import json
import sys

BEGIN = "<!-- gpu-compare:begin -->"
END = "<!-- gpu-compare:end -->"

# Display order and names.
ORDER = [
    ("libvmem-cuda-legacy", "libvmem (cuda), before issue 14"),
    ("libvmem-cuda", "libvmem (cuda backend)"),
    ("libvmem-vmm-legacy", "libvmem (vmm), before issue 14"),
    ("libvmem-vmm", "libvmem (vmm backend)"),
    ("torch", "PyTorch caching allocator"),
    ("torch-expandable", "PyTorch, expandable segments"),
    ("cudaMallocAsync", "cudaMallocAsync (default pool)"),
    ("cudaMalloc", "cudaMalloc / cudaFree"),
]


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if "backend" in r and "allocator" not in r:
                r["allocator"] = "libvmem-" + r["backend"]
            if "trace" in r and "allocator" in r:
                rows.append(r)
    return rows


def fmt_ns(v):
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def table(rows, meta):
    traces = sorted({r["trace"] for r in rows})
    by = {(r["trace"], r["allocator"]): r for r in rows}
    out = []
    out.append(f"Measured {meta.get('date', '?')} on **{meta.get('gpu', '?')}**, with")
    out.append(f"`{meta.get('command', '?')}`.")
    out.append("")
    out.append("Warm ns/op: median over the timed passes of host wall time per allocation or free "
               "(one warm-up pass first, same parsed trace and loop for every allocator). "
               "held/live: peak device memory held over peak live bytes requested.")
    out.append("")
    out.append("| trace | allocator | warm ns/op | held / live | failed allocs | vs PyTorch ns/op |")
    out.append("| --- | --- | ---: | ---: | ---: | ---: |")
    for t in traces:
        ref = by.get((t, "torch"))
        for key, label in ORDER:
            r = by.get((t, key))
            if not r:
                continue
            frag = r.get("frag")
            ratio = ""
            if ref and r.get("ns_per_op") and ref.get("ns_per_op") and key != "torch":
                ratio = f"{r['ns_per_op'] / ref['ns_per_op']:.2f}×"
            out.append(f"| {t} | {label} | {fmt_ns(r.get('ns_per_op'))} | "
                       f"{frag:.3f} | {r.get('failed_allocs', 0)} | {ratio} |"
                       if isinstance(frag, (int, float)) else
                       f"| {t} | {label} | {fmt_ns(r.get('ns_per_op'))} | — | "
                       f"{r.get('failed_allocs', 0)} | {ratio} |")
    notes = meta.get("notes") or []
    if notes:
        out.append("")
        for n in notes:
            out.append(f"- {n}")
    sources = sorted({f"{r['allocator']}: {r['peak_source']}" for r in rows if r.get("peak_source")})
    if sources:
        out.append("")
        out.append("Peak held measured as: " + "; ".join(sources) +
                   "; libvmem: its own device_peak_held statistic.")
    return "\n".join(out)


def write_into(path, text):
    try:
        with open(path) as f:
            doc = f.read()
    except FileNotFoundError:
        doc = "# Benchmarks\n"
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        doc = head + block + tail
    else:
        doc = doc.rstrip("\n") + "\n\n## Side by side on a GPU\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(doc)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--meta", required=True)
    ap.add_argument("--write")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    rows = load(a.results)
    if not rows:
        print("compare_table: no results", file=sys.stderr)
        return 1
    with open(a.meta) as f:
        meta = json.load(f)
    text = table(rows, meta)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    if a.write:
        write_into(a.write, text)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
