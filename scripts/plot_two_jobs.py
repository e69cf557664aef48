#!/usr/bin/env python3
"""Plots the memory of two jobs over time from the example scheduler's CSV
(examples/two_jobs/scheduler.py --log) as an SVG, with no dependency.

    plot_two_jobs.py memory.csv out.svg [--title TEXT] [--budget BYTES]

Lines: each job's limit (dashed) and the most it used in its last step
(device + host, solid); the opportunistic job's perf share as a step line
on the right axis; the budget as a grey line.
"""
import argparse
import csv

GiB = float(1 << 30)
W, H, L, R, T, B = 900, 420, 70, 70, 40, 50


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("svg")
    ap.add_argument("--title", default="Two jobs on one GPU: memory over time")
    ap.add_argument("--budget", type=float, default=0)
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    if not rows:
        raise SystemExit("no rows in %s" % a.csv)
    t = [float(r["t"]) for r in rows]
    series = {
        "hp limit": ([int(r["hp_limit"]) / GiB for r in rows], "#1f77b4", "6,4"),
        "hp used (device + host)": ([(int(r["hp_used"]) + int(r["hp_host"])) / GiB
                                     for r in rows], "#1f77b4", ""),
        "opp limit": ([int(r["opp_limit"]) / GiB for r in rows], "#d62728", "6,4"),
        "opp used (device + host)": ([(int(r["opp_used"]) + int(r["opp_host"])) / GiB
                                      for r in rows], "#d62728", ""),
    }
    perf = [int(r["opp_perf"]) for r in rows]
    ymax = max(max(v) for v, _, _ in series.values())
    ymax = max(ymax, a.budget / GiB) * 1.08 or 1
    tmax = max(t) or 1

    def x(v):
        return L + (W - L - R) * v / tmax

    def y(v):
        return H - B - (H - T - B) * v / ymax

    def yp(v):
        return H - B - (H - T - B) * v / 100.0

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20" font-size="14">%s</text>' % (L, a.title)]
    for i in range(6):  # axes and ticks
        gv = ymax * i / 5
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' %
                   (L, W - R, y(gv), y(gv)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%.1f</text>' % (L - 6, y(gv) + 4, gv))
        out.append('<text x="%d" y="%.1f">%d</text>' % (W - R + 6, yp(20 * i) + 4, 20 * i))
        tv = tmax * i / 5
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%.0f</text>' % (x(tv), H - B + 16, tv))
    out.append('<text x="%d" y="%d" text-anchor="middle">seconds</text>' % ((L + W - R) / 2, H - 10))
    out.append('<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">GiB</text>'
               % (H / 2, H / 2))
    out.append('<text x="%d" y="%d" transform="rotate(90 %d %d)" text-anchor="middle">'
               'opp perf share (%%)</text>' % (W - 20, H / 2, W - 20, H / 2))
    if a.budget:
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#888" stroke-width="1.5"/>'
                   % (L, W - R, y(a.budget / GiB), y(a.budget / GiB)))
    pts = []
    for i, (tv, pv) in enumerate(zip(t, perf)):
        if i:
            pts.append("%.1f,%.1f" % (x(tv), yp(perf[i - 1])))
        pts.append("%.1f,%.1f" % (x(tv), yp(pv)))
    out.append('<polyline fill="none" stroke="#2ca02c" stroke-width="1" points="%s"/>' % " ".join(pts))
    for name, (vals, color, dash) in series.items():
        pts = " ".join("%.1f,%.1f" % (x(tv), y(v)) for tv, v in zip(t, vals))
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.6" %s points="%s"/>' %
                   (color, 'stroke-dasharray="%s"' % dash if dash else "", pts))
    legend = list(series.items()) + [("opp perf (right axis)", (None, "#2ca02c", ""))]
    if a.budget:
        legend.append(("budget", (None, "#888", "")))
    for i, (name, (_, color, dash)) in enumerate(legend):
        lx, ly = L + 10 + (i % 3) * 260, T + 4 + (i // 3) * 16
        out.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2" %s/>' %
                   (lx, lx + 24, ly, ly, color, 'stroke-dasharray="%s"' % dash if dash else ""))
        out.append('<text x="%d" y="%d">%s</text>' % (lx + 30, ly + 4, name))
    out.append("</svg>")
    with open(a.svg, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
