#!/usr/bin/env python3
"""Draws a vmem-replay --timeline CSV as an SVG (Python standard library only).

    plot_timeline.py TIMELINE.csv [-o OUT.svg] [--title TEXT] [--x time|event]

The CSV has the columns event,time_us,live_bytes,device_held,limit,host_held.
Lines: bytes live (requested), device memory held, host memory held (if
any), and the limit when it is within reach of the other lines (a limit far
above them, e.g. "the whole device", is named in the legend instead).
Each line keeps its minimum and maximum per pixel column, so peaks survive.
"""
import argparse
import csv
import math
import os
import sys

W, H = 900, 380
ML, MR, MT, MB = 70, 20, 40, 50  # margins
COLOURS = {"live": "#1f77b4", "held": "#ff7f0e", "host": "#2ca02c", "limit": "#d62728"}


def read(path):
    cols = {"event": [], "time_us": [], "live_bytes": [], "device_held": [], "limit": [],
            "host_held": []}
    with open(path, newline="") as f:
        r = csv.DictReader(f)
        missing = [c for c in cols if c not in (r.fieldnames or [])]
        if missing:
            raise SystemExit(f"{path}: missing columns {', '.join(missing)}")
        for line, row in enumerate(r, start=2):
            try:
                for c in cols:
                    cols[c].append(int(row[c]))
            except (TypeError, ValueError):
                raise SystemExit(f"{path}:{line}: not an integer row")
    if not cols["event"]:
        raise SystemExit(f"{path}: no rows")
    return cols


def nice_step(span, target=6):
    raw = span / target
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 2.5, 5, 10):
        if m * mag >= raw:
            return m * mag
    return 10 * mag


def unit_of(vmax):
    for name, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if vmax >= div:
            return name, div
    return "bytes", 1


def envelope(xs, ys, x0, x1, width):
    """Per pixel column: (x, min, max, first, last) so that peaks survive."""
    cols = {}
    span = (x1 - x0) or 1
    for x, y in zip(xs, ys):
        px = int((x - x0) / span * (width - 1))
        c = cols.get(px)
        if c is None:
            cols[px] = [y, y, y, y]
        else:
            c[0] = min(c[0], y)
            c[1] = max(c[1], y)
            c[3] = y
    return sorted(cols.items())


def path_for(env, sx, sy):
    pts = []
    for px, (lo, hi, first, last) in env:
        x = sx(px)
        pts.append((x, sy(first)))
        if lo != hi:
            pts.append((x, sy(lo) if first > lo else sy(hi)))
            pts.append((x, sy(hi) if first > lo else sy(lo)))
        pts.append((x, sy(last)))
    out = []
    for i, (x, y) in enumerate(pts):
        out.append(("M" if i == 0 else "L") + f"{x:.1f},{y:.1f}")
    return " ".join(out)


def esc(s):
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(cols, title, xkind):
    if xkind == "time":
        t0 = cols["time_us"][0]
        xs = [(t - t0) / 1e6 for t in cols["time_us"]]
        xlabel = "time since the first event (s)"
    else:
        xs = cols["event"]
        xlabel = "event"
    series = [("live", "live (requested)", cols["live_bytes"]),
              ("held", "device held", cols["device_held"])]
    if max(cols["host_held"]) > 0:
        series.append(("host", "host held (fallback)", cols["host_held"]))
    others = max(max(s[2]) for s in series)
    limit_max = max(cols["limit"])
    show_limit = 0 < limit_max <= 2 * others
    if show_limit:
        series.append(("limit", "limit", cols["limit"]))
    vmax = max(max(s[2]) for s in series) or 1
    unit, div = unit_of(vmax)
    ystep = nice_step(vmax / div)
    ytop = math.ceil(vmax / div / ystep) * ystep
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x1 = x0 + 1
    pw, ph = W - ML - MR, H - MT - MB

    def sx_px(px):
        return ML + px

    def sy(v):
        return MT + ph - (v / div) / ytop * ph

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{esc(title)}</text>']
    # grid and axes
    y = 0.0
    while y <= ytop + 1e-9:
        py = MT + ph - y / ytop * ph
        o.append(f'<line x1="{ML}" y1="{py:.1f}" x2="{ML + pw}" y2="{py:.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{ML - 6}" y="{py + 4:.1f}" text-anchor="end">{y:g}</text>')
        y += ystep
    xstep = nice_step(x1 - x0)
    xv = math.ceil(x0 / xstep) * xstep
    while xv <= x1 + 1e-9:
        px = ML + (xv - x0) / (x1 - x0) * pw
        o.append(f'<line x1="{px:.1f}" y1="{MT + ph}" x2="{px:.1f}" y2="{MT + ph + 5}" stroke="#333"/>')
        o.append(f'<text x="{px:.1f}" y="{MT + ph + 18}" text-anchor="middle">{xv:g}</text>')
        xv += xstep
    o.append(f'<rect x="{ML}" y="{MT}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    o.append(f'<text x="{ML + pw / 2}" y="{H - 10}" text-anchor="middle">{esc(xlabel)}</text>')
    o.append(f'<text x="16" y="{MT + ph / 2}" text-anchor="middle" '
             f'transform="rotate(-90 16 {MT + ph / 2})">{unit}</text>')
    # lines
    for key, _, ys in series:
        env = envelope(xs, ys, x0, x1, pw)
        dash = ' stroke-dasharray="6,4"' if key == "limit" else ""
        o.append(f'<path d="{path_for(env, sx_px, sy)}" fill="none" stroke="{COLOURS[key]}" '
                 f'stroke-width="1.3"{dash}/>')
    # legend
    lx, ly = ML + 10, MT + 14
    legend = [(COLOURS[k], f"{label}, peak {max(ys) / div:.2f} {unit}") for k, label, ys in series]
    if not show_limit and limit_max:
        legend.append(("#999", f"limit {limit_max / div:.1f} {unit} (off the chart)"))
    width = 30 + 7 * max(len(t) for _, t in legend)
    o.append(f'<rect x="{lx - 6}" y="{ly - 14}" width="{width}" height="{16 * len(legend) + 6}" '
             f'fill="white" fill-opacity="0.85" stroke="#ccc"/>')
    for i, (colour, text) in enumerate(legend):
        yy = ly + i * 16
        o.append(f'<line x1="{lx}" y1="{yy - 4}" x2="{lx + 18}" y2="{yy - 4}" stroke="{colour}" '
                 f'stroke-width="2"/>')
        o.append(f'<text x="{lx + 24}" y="{yy}">{esc(text)}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("-o", "--output")
    ap.add_argument("--title")
    ap.add_argument("--x", choices=("time", "event"), default="time")
    a = ap.parse_args()
    cols = read(a.csv)
    title = a.title or os.path.basename(a.csv)
    svg = render(cols, title, a.x)
    out = a.output or os.path.splitext(a.csv)[0] + ".svg"
    with open(out, "w") as f:
        f.write(svg)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
