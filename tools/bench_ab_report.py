#!/usr/bin/env python3
"""The statistics and the report of scripts/bench-ab.sh (python3's standard library only).

    tools/bench_ab_report.py --dir RUN_DIR --base NAME --try NAME [--snapshots DIR]
                             [--bench-flags TEXT]

reads RUN_DIR/runs.tsv (one line per bench run: index, base|try, snapshot, exit status, wall
seconds, the bench's --json file) and RUN_DIR/machine.json, and writes RUN_DIR/report.json and
RUN_DIR/report.html (tables and inline SVG plots; nothing is fetched when it is opened).

Per case and figure:
  ratio      mean(TRY) / mean(BASE)
  ci95       the 95% confidence interval of the ratio: Student's t (pairs - 1 degrees of
             freedom) around the mean log ratio of the pairs (run k of TRY against run k of BASE;
             adjacent in A-B-B-A order), with the larger of the paired standard error and the
             unpaired (Welch) one of the two builds' mean logs, exp'd back. Null with one pair.
  noise      the noise floor: the largest relative gap between two runs of the same build,
             (max - min) / mean, over both builds, and at least 0.5%. Null with one run per
             build.
  verdict    faster / slower (prefill, decode, time to first token) or better / worse (memory,
             disk bytes per token, hit rate) only when the whole interval lies outside the noise
             band 1 +- noise floor; otherwise "within noise" ("too few runs" when either is
             null, "no data" when a build has no value).
"""
import argparse
import html
import json
import math
import os
import sys

# (key, label, unit, which way is better, path into a bench case, speed figure?)
FIGURES = [
    ("prefill_tok_s", "prefill", "tok/s", "higher", ("prefill", "tok_s"), True),
    ("decode_tok_s", "decode", "tok/s", "higher", ("decode", "tok_s"), True),
    ("ttft_s", "time to first token", "s", "lower", ("ttft_seconds",), True),
    ("private_memory_bytes", "private memory (peak)", "bytes", "lower",
     ("memory", "peak_private_bytes"), False),
    ("disk_bytes_per_token", "disk bytes per decoded token", "bytes", "lower",
     ("decode", "storage", "read_bytes_per_token"), False),
    ("hit_rate", "expert-cache hit rate (decode)", "", "higher",
     ("decode", "experts", "hit_rate"), False),
]

# Two-sided 95% quantiles of Student's t (df 1..30); beyond, the normal's 1.96 is close enough.
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t975(df):
    if df < 1:
        raise ValueError("t quantile needs df >= 1")
    return T975[df - 1] if df <= len(T975) else 1.96


def mean(xs):
    return sum(xs) / len(xs)


def ratio_ci(base, trial):
    """Mean ratio and the 95% CI of paired log ratios: (ratio, low, high); low/high None with
    fewer than two pairs, or when a value is not positive (no logarithm)."""
    if not base or not trial:
        return None, None, None
    mb, mt = mean(base), mean(trial)
    if mb == 0:
        return (1.0 if mt == 0 else None), None, None
    ratio = mt / mb
    n = min(len(base), len(trial))
    if n < 2 or any(v <= 0 for v in base[:n] + trial[:n]):
        return ratio, None, None
    logs = [math.log(t / b) for b, t in zip(base[:n], trial[:n])]
    m = mean(logs)
    paired = math.sqrt(sum((x - m) ** 2 for x in logs) / (n - 1)) / math.sqrt(n)
    # A few pairs can agree by chance (three ratios within 0.2% of each other while each build's
    # runs spread 3%): the paired error then claims a precision the runs do not have. The
    # unpaired (Welch) error of the two builds' mean logs bounds it from below.
    lb = [math.log(v) for v in base]
    lt = [math.log(v) for v in trial]
    unpaired = math.sqrt(variance(lb) / len(lb) + variance(lt) / len(lt))
    half = t975(n - 1) * max(paired, unpaired)
    return ratio, math.exp(m - half), math.exp(m + half)


def variance(xs):
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def spread(xs):
    """(max - min) / mean of one build's runs; None with fewer than two."""
    if len(xs) < 2:
        return None
    m = mean(xs)
    if m == 0:
        return 0.0 if max(xs) == min(xs) else None
    return (max(xs) - min(xs)) / abs(m)


# Differences under this are never claimed, however steady the runs (peak memory varies by a
# few pages between two builds of the same code).
MIN_NOISE = 0.005


def noise_floor(base, trial):
    s = [x for x in (spread(base), spread(trial)) if x is not None]
    return max(max(s), MIN_NOISE) if s else None


def verdict(ratio, low, high, noise, better, speed):
    if ratio is None:
        return "no data"
    if low is None or noise is None:
        return "too few runs"
    # The whole interval must clear the noise band around 1, not just the ratio.
    if low <= 1.0 + noise and high >= 1.0 - noise:
        return "within noise"
    up = ratio > 1.0
    good = up if better == "higher" else not up
    if speed:
        return "faster" if good else "slower"
    return "better" if good else "worse"


def dig(obj, path):
    for k in path:
        if not isinstance(obj, dict) or k not in obj:
            return None
        obj = obj[k]
    return obj if isinstance(obj, (int, float)) and not isinstance(obj, bool) else None


def figure_stats(base, trial, better, speed):
    ratio, low, high = ratio_ci(base, trial)
    noise = noise_floor(base, trial)
    # Zero in every run of both (no disk reads on a warm run): equal, nothing to test.
    same_zero = bool(base) and bool(trial) and not any(base) and not any(trial)
    return {
        "base_mean": mean(base) if base else None,
        "try_mean": mean(trial) if trial else None,
        "ratio": ratio,
        "ci95": [low, high] if low is not None else None,
        "noise_floor": noise,
        "verdict": "within noise" if same_zero else verdict(ratio, low, high, noise, better, speed),
    }


def read_runs(run_dir):
    runs = []
    with open(os.path.join(run_dir, "runs.tsv")) as f:
        for line in f:
            if not line.strip():
                continue
            idx, which, snap, rc, wall, path = line.rstrip("\n").split("\t")
            bench = None
            full = os.path.join(run_dir, path)
            if rc == "0" and os.path.exists(full):
                with open(full) as jf:
                    bench = json.load(jf)
            runs.append({"index": int(idx), "build": which, "snapshot": snap,
                         "exit_status": int(rc), "wall_seconds": float(wall), "json": path,
                         "bench": bench})
    return runs


def read_commit(snapshots, name):
    try:
        with open(os.path.join(snapshots, name, "commit")) as f:
            lines = f.read().split()
        return {"describe": lines[0], "id": lines[1] if len(lines) > 1 else lines[0]}
    except OSError:
        return {"describe": "unknown", "id": "unknown"}


def median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def build_report(runs, base_name, try_name, machine, commits, commands, bench_flags):
    ok = [r for r in runs if r["bench"] is not None]
    case_names = []
    for r in ok:
        for c in r["bench"].get("cases", []):
            if c["name"] not in case_names:
                case_names.append(c["name"])
    cases = []
    for name in case_names:
        figs = []
        for key, label, unit, better, path, speed in FIGURES:
            values = {"base": [], "try": []}
            per_run = []
            for r in runs:
                v = None
                if r["bench"] is not None:
                    for c in r["bench"].get("cases", []):
                        if c["name"] == name:
                            v = dig(c, path)
                per_run.append({"index": r["index"], "build": r["build"], "value": v})
                if v is not None:
                    values[r["build"]].append(float(v))
            f = {"key": key, "label": label, "unit": unit, "better": better, "runs": per_run,
                 "base_values": values["base"], "try_values": values["try"]}
            f.update(figure_stats(values["base"], values["try"], better, speed))
            figs.append(f)
        cases.append({"name": name, "figures": figs})
    # The probes of each run, as the machine's yardsticks.
    mem = [dig(r["bench"], ("memory_probe", "read_gb_s")) for r in ok]
    disk = [dig(r["bench"], ("disk_probe", "parallel_gb_s")) for r in ok]
    first = ok[0]["bench"] if ok else {}
    machine = dict(machine)
    machine["memory_probe_gb_s"] = median([v for v in mem if v is not None])
    machine["disk_probe_gb_s"] = median([v for v in disk if v is not None])
    machine["backend"] = dig_str(first, ("options", "backend"))
    return {
        "format": "redwing-bench-ab/1",
        "base": {"name": base_name, **commits["base"]},
        "try": {"name": try_name, **commits["try"]},
        "pairs": sum(1 for r in runs if r["build"] == "base"),
        "order": [r["build"] for r in runs],
        "bench_flags": bench_flags,
        "commands": commands,
        "machine": machine,
        "runs": [{k: v for k, v in r.items() if k != "bench"} for r in runs],
        "failed_runs": sum(1 for r in runs if r["exit_status"] != 0),
        "cases": cases,
        "method": ("A-B-B-A in fresh processes after one uncounted run of each; ratio = "
                   "mean(TRY)/mean(BASE); 95% CI: Student's t over the paired log ratios with the "
                   "larger of the paired and the unpaired standard error; noise floor: the largest (max-min)/mean of one "
                   "build's runs; a verdict only when the whole CI lies outside 1 +- the noise "
                   "floor"),
    }


def dig_str(obj, path):
    for k in path:
        if not isinstance(obj, dict) or k not in obj:
            return None
        obj = obj[k]
    return obj if isinstance(obj, str) else None


# --- HTML ---------------------------------------------------------------------------------

def fmt(v, unit=""):
    """A number for the tables (the exact value is in the cell's data-value)."""
    if v is None:
        return "–"
    if unit == "ratio":
        return f"{v:.4f}"
    if unit == "bytes":
        for scale, suffix in ((1 << 30, " GiB"), (1 << 20, " MiB"), (1 << 10, " KiB")):
            if abs(v) >= scale:
                return f"{v / scale:.2f}{suffix}"
        return f"{v:.0f} B"
    if abs(v) >= 100:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.3f}"
    return f"{v:.4g}"


def cell(v, field, unit="", cls=""):
    dv = "" if v is None else repr(float(v))
    c = f' class="{cls}"' if cls else ""
    return f'<td{c} data-field="{field}" data-value="{dv}">{html.escape(fmt(v, unit))}</td>'


COLORS = {"base": "#4c72b0", "try": "#dd8452"}


def svg_runs(fig, width=360, height=150):
    """Each run's value in run order, coloured by build."""
    pts = [(r["index"], r["value"], r["build"]) for r in fig["runs"] if r["value"] is not None]
    out = [f'<svg class="runs-plot" data-figure="{fig["key"]}" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    out.append(f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff" stroke="#ccc"/>')
    if pts:
        lo, hi = min(p[1] for p in pts), max(p[1] for p in pts)
        if hi == lo:
            lo, hi = lo - 1 if lo == 0 else lo * 0.95, hi + 1 if hi == 0 else hi * 1.05
        n = max(p[0] for p in pts)
        x = lambda i: 40 + (width - 60) * ((i - 1) / max(1, n - 1))
        y = lambda v: height - 25 - (height - 45) * (v - lo) / (hi - lo)
        for v in (lo, hi):
            out.append(f'<text x="2" y="{y(v) + 4:.1f}" font-size="9">{html.escape(fmt(v, fig["unit"]))}</text>')
        for i, v, b in pts:
            out.append(f'<circle class="run-point" data-build="{b}" cx="{x(i):.1f}" cy="{y(v):.1f}" '
                       f'r="4" fill="{COLORS[b]}"><title>run {i} {b}: {v}</title></circle>')
        out.append(f'<text x="40" y="{height - 6}" font-size="9">run order →</text>')
    else:
        out.append(f'<text x="10" y="{height / 2}" font-size="11">no values</text>')
    out.append("</svg>")
    return "".join(out)


def svg_ratios(case, width=520):
    """Each figure's ratio with its 95% interval, the noise floor shaded around 1."""
    figs = [f for f in case["figures"] if f["ratio"] is not None]
    row = 26
    height = 30 + row * max(1, len(figs))
    vals = [1.0]
    for f in figs:
        vals.append(f["ratio"])
        if f["ci95"]:
            vals += f["ci95"]
        if f["noise_floor"] is not None:
            vals += [1 - f["noise_floor"], 1 + f["noise_floor"]]
    lo, hi = min(vals), max(vals)
    pad = max(0.02, (hi - lo) * 0.1)
    lo, hi = lo - pad, hi + pad
    left, right = 190, width - 20
    x = lambda v: left + (right - left) * (v - lo) / (hi - lo)
    out = [f'<svg class="ratio-plot" data-case="{html.escape(case["name"])}" width="{width}" '
           f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    out.append(f'<rect x="0" y="0" width="{width}" height="{height}" fill="#fff" stroke="#ccc"/>')
    out.append(f'<line x1="{x(1):.1f}" y1="5" x2="{x(1):.1f}" y2="{height - 20}" stroke="#888" '
               'stroke-dasharray="3,3"/>')
    out.append(f'<text x="{x(1) - 4:.1f}" y="{height - 6}" font-size="9">1.0</text>')
    out.append(f'<text x="{left}" y="{height - 6}" font-size="9">{lo:.3f}</text>')
    out.append(f'<text x="{right - 30}" y="{height - 6}" font-size="9">{hi:.3f}</text>')
    for k, f in enumerate(figs):
        yc = 18 + row * k
        out.append(f'<text x="4" y="{yc + 4}" font-size="11">{html.escape(f["label"])}</text>')
        if f["noise_floor"] is not None:
            a, b = x(1 - f["noise_floor"]), x(1 + f["noise_floor"])
            out.append(f'<rect class="noise-band" x="{a:.1f}" y="{yc - 8}" width="{b - a:.1f}" '
                       'height="16" fill="#eee"/>')
        if f["ci95"]:
            out.append(f'<line class="ci" x1="{x(f["ci95"][0]):.1f}" y1="{yc}" '
                       f'x2="{x(f["ci95"][1]):.1f}" y2="{yc}" stroke="#333" stroke-width="2"/>')
        color = {"faster": "#2a9d55", "better": "#2a9d55", "slower": "#c0392b",
                 "worse": "#c0392b"}.get(f["verdict"], "#555")
        out.append(f'<circle class="ratio-point" data-figure="{f["key"]}" cx="{x(f["ratio"]):.1f}" '
                   f'cy="{yc}" r="5" fill="{color}"><title>{html.escape(f["label"])}: '
                   f'{f["ratio"]:.4f} ({f["verdict"]})</title></circle>')
    out.append("</svg>")
    return "".join(out)


def render_html(rep):
    e = html.escape
    m = rep["machine"]
    parts = ["<!doctype html><html><head><meta charset='utf-8'>",
             f"<title>A-B: {e(rep['base']['name'])} vs {e(rep['try']['name'])}</title>",
             "<style>body{font-family:sans-serif;margin:20px;max-width:1200px}"
             "table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;"
             "padding:3px 6px;font-size:13px;text-align:right}th{background:#f4f4f4}"
             "td.label{text-align:left}.faster,.better{background:#dff5e3}"
             ".slower,.worse{background:#f8dcdc}.plots{display:flex;flex-wrap:wrap;gap:8px}"
             "figure{margin:0}figcaption{font-size:12px}code{font-size:12px}</style>",
             "</head><body>"]
    parts.append(f"<h1>A-B comparison: <span id='base-name'>{e(rep['base']['name'])}</span> "
                 f"(BASE) vs <span id='try-name'>{e(rep['try']['name'])}</span> (TRY)</h1>")
    parts.append("<table id='builds'><tr><th>build</th><th>snapshot</th><th>commit</th></tr>")
    for k in ("base", "try"):
        b = rep[k]
        parts.append(f"<tr><td class='label'>{k.upper()}</td><td class='label'>{e(b['name'])}</td>"
                     f"<td class='label'><code>{e(b['describe'])} ({e(b['id'])})</code></td></tr>")
    parts.append("</table>")
    if rep.get("try_flags"):
        parts.append(f"<p>TRY's runs add <code id='try-flags'>{e(rep['try_flags'])}</code>.</p>")
    parts.append(f"<p>{rep['pairs']} pairs, order {' '.join(o.upper() for o in rep['order'])}; "
                 f"{rep['failed_runs']} failed runs. {e(rep['method'])}.</p>")
    parts.append("<h2>Machine</h2><table id='machine'>")
    for k in ("cpu", "cores", "cores_usable", "memory_bytes", "memory_limit", "kernel", "gpu",
              "backend", "memory_probe_gb_s", "disk_probe_gb_s", "host"):
        v = m.get(k)
        parts.append(f"<tr><th>{e(k)}</th><td class='label' data-field='{k}'>"
                     f"{e('–' if v is None else str(v))}</td></tr>")
    parts.append("</table>")
    for case in rep["cases"]:
        cname = e(case["name"])
        parts.append(f"<h2>Case {cname}</h2>")
        n_runs = len(rep["order"])
        head = "".join(f"<th>run {i + 1} {o.upper()}</th>" for i, o in enumerate(rep["order"]))
        parts.append(f"<table class='case' data-case='{cname}'><tr><th>figure</th>{head}"
                     "<th>BASE mean</th><th>TRY mean</th><th>TRY/BASE</th><th>95% CI</th>"
                     "<th>noise floor</th><th>verdict</th></tr>")
        for f in case["figures"]:
            row = [f"<tr data-figure='{f['key']}'><td class='label'>{e(f['label'])}"
                   f"{' (' + e(f['unit']) + ')' if f['unit'] else ''}</td>"]
            for r in f["runs"]:
                row.append(cell(r["value"], f"run{r['index']}", f["unit"]))
            row.append(cell(f["base_mean"], "base_mean", f["unit"]))
            row.append(cell(f["try_mean"], "try_mean", f["unit"]))
            row.append(cell(f["ratio"], "ratio", "ratio"))
            ci = f["ci95"]
            row.append(f"<td data-field='ci95' data-low='{'' if not ci else repr(ci[0])}' "
                       f"data-high='{'' if not ci else repr(ci[1])}'>"
                       f"{'–' if not ci else f'{ci[0]:.4f} – {ci[1]:.4f}'}</td>")
            nf = f["noise_floor"]
            row.append(f"<td data-field='noise_floor' data-value='{'' if nf is None else repr(nf)}'>"
                       f"{'–' if nf is None else f'±{100 * nf:.2f}%'}</td>")
            v = f["verdict"]
            row.append(f"<td data-field='verdict' class='{v.replace(' ', '-')}'>{e(v)}</td></tr>")
            parts.append("".join(row))
        assert len(case["figures"][0]["runs"]) == n_runs
        parts.append("</table>")
        parts.append("<div class='plots'>")
        parts.append(f"<figure>{svg_ratios(case)}<figcaption>TRY/BASE with 95% CI; grey: the "
                     "noise floor around 1</figcaption></figure>")
        for f in case["figures"]:
            parts.append(f"<figure>{svg_runs(f)}<figcaption>{e(f['label'])}: "
                         "<span style='color:#4c72b0'>● BASE</span> "
                         "<span style='color:#dd8452'>● TRY</span></figcaption></figure>")
        parts.append("</div>")
    parts.append("<h2>Commands</h2><ol id='commands'>")
    for c in rep["commands"]:
        parts.append(f"<li><code>{e(c)}</code></li>")
    parts.append("</ol>")
    parts.append("<script type='application/json' id='report-json'>"
                 + json.dumps(rep).replace("</", "<\\/") + "</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--try", dest="trial", required=True)
    ap.add_argument("--snapshots", default="build/bench-snapshots")
    ap.add_argument("--bench-flags", default="")
    ap.add_argument("--try-flags", default="", help="flags TRY's runs had on top")
    a = ap.parse_args(argv)
    runs = read_runs(a.dir)
    if not runs:
        print("bench_ab_report.py: no runs in " + a.dir, file=sys.stderr)
        return 1
    machine = {}
    mpath = os.path.join(a.dir, "machine.json")
    if os.path.exists(mpath):
        with open(mpath) as f:
            machine = json.load(f)
    commands = []
    cpath = os.path.join(a.dir, "commands.txt")
    if os.path.exists(cpath):
        with open(cpath) as f:
            commands = [l.rstrip("\n") for l in f if l.strip()]
    commits = {"base": read_commit(a.snapshots, a.base), "try": read_commit(a.snapshots, a.trial)}
    rep = build_report(runs, a.base, a.trial, machine, commits, commands, a.bench_flags)
    rep["try_flags"] = a.try_flags
    with open(os.path.join(a.dir, "report.json"), "w") as f:
        json.dump(rep, f, indent=2)
        f.write("\n")
    with open(os.path.join(a.dir, "report.html"), "w") as f:
        f.write(render_html(rep))
    # A short text summary for the terminal.
    for case in rep["cases"]:
        print(f"case {case['name']}:")
        for fg in case["figures"]:
            ci = fg["ci95"]
            print(f"  {fg['label']:<32} ratio {('%.4f' % fg['ratio']) if fg['ratio'] is not None else '–':>8}"
                  f"  CI {('%.4f-%.4f' % tuple(ci)) if ci else '–':>15}"
                  f"  noise {('±%.2f%%' % (100 * fg['noise_floor'])) if fg['noise_floor'] is not None else '–':>8}"
                  f"  {fg['verdict']}")
    return 0 if rep["failed_runs"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
