#!/usr/bin/env python3
"""Sums up a trace of `redwing ... --trace FILE` (Chrome trace event JSON; python3 stdlib only).

    tools/trace_summary.py FILE [--window NAME] [--top N] [--json]

Prints
  - GPU time per kernel (and per copy kind): launches, total, mean, share of all kernel time
    (kernels overlap under programmatic dependent launch, so a kernel's span includes its wait
    for the one before; REDWING_CUDA_PDL=0 gives spans without overlap);
  - GPU idle time by what the CPU was doing: the gaps in the union of every GPU stream's work,
    each split by the innermost span open on the main thread at that moment;
  - I/O wait by layer: the expert waits ("experts"/"wait" spans, whose "layer" argument names
    the layer), with the expert reads and CUDA host syncs beside them.
--window NAME limits the GPU figures to the main thread's spans of that name (e.g. "decode").
--json prints the same as one JSON object.

A CUDA trace records the GPU's work of only some forward calls (a sample: the trace's otherData
"gpu_sampling", and each "forward call" span's gpu_traced argument). The GPU figures then cover
only the recorded calls, each from its start to the next call's start, so the calls the GPU did
not record do not count as idle.
"""
import argparse
import json
import sys
from collections import defaultdict


def load(path):
    with open(path) as f:
        t = json.load(f)
    events = t["traceEvents"] if isinstance(t, dict) else t
    return t if isinstance(t, dict) else {"traceEvents": t}, events


def thread_names(events):
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e["pid"], e["tid"])] = e["args"]["name"]
    return names


def main_thread(events, names):
    for key, n in names.items():
        if n == "main" or n.startswith("main ("):
            return key
    counts = defaultdict(int)
    for e in events:
        if e.get("ph") == "X" and not str(e.get("cat", "")).startswith("gpu"):
            counts[(e["pid"], e["tid"])] += 1
    return max(counts, key=counts.get) if counts else None


def merge(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def innermost_segments(spans):
    """Non-overlapping (start, end, label) pieces of one thread's nested spans, each labelled by
    the innermost span open there (None where none is)."""
    spans = sorted(spans, key=lambda s: (s[0], -(s[1] - s[0])))
    segs, stack, cur = [], [], None

    def emit(a, b, label):
        if cur is not None and b > a:
            segs.append((a, b, label))

    for s0, s1, label in spans:
        while stack and stack[-1][1] <= s0:
            top = stack.pop()
            emit(cur, top[1], top[2])
            cur = top[1]
        if cur is not None:
            emit(cur, s0, stack[-1][2] if stack else None)
        cur = s0
        stack.append((s0, s1, label))
    while stack:
        top = stack.pop()
        emit(cur, top[1], top[2])
        cur = max(cur, top[1])
    return segs


def intersect(a_list, b_list):
    """Pairs of overlapping pieces of two sorted lists of (start, end, ...)."""
    i = j = 0
    while i < len(a_list) and j < len(b_list):
        a, b = a_list[i], b_list[j]
        lo, hi = max(a[0], b[0]), min(a[1], b[1])
        if hi > lo:
            yield lo, hi, a, b
        if a[1] < b[1]:
            i += 1
        else:
            j += 1


def traced_calls(xs, gpu):
    """The recorded calls' windows [start, next call's start), or None when every call was
    recorded (or the trace has no forward calls)."""
    calls = sorted((e["ts"], e.get("args", {}).get("gpu_traced", 1)) for e in xs
                   if e.get("cat") == "cuda" and e["name"] == "forward call")
    if not calls or all(t for _, t in calls):
        return None, len(calls), len(calls)
    end = max([e["ts"] + e["dur"] for e in gpu] + [e["ts"] + e["dur"] for e in xs])
    wins = [[t0, calls[i + 1][0] if i + 1 < len(calls) else end]
            for i, (t0, traced) in enumerate(calls) if traced]
    return merge(wins), sum(1 for _, t in calls if t), len(calls)


def summarize(events, window=None):
    names = thread_names(events)
    main = main_thread(events, names)
    xs = [e for e in events if e.get("ph") == "X"]
    gpu = [e for e in xs if str(e.get("cat", "")).startswith("gpu")]
    main_spans = [(e["ts"], e["ts"] + e["dur"], f'{e.get("cat", "")}/{e["name"]}') for e in xs
                  if (e["pid"], e["tid"]) == main and not str(e.get("cat", "")).startswith("gpu")]

    # The window: the whole GPU activity, or the main thread's spans of one name.
    if window:
        win = merge([[e["ts"], e["ts"] + e["dur"]] for e in xs
                     if (e["pid"], e["tid"]) == main and e["name"] == window])
    else:
        win = [[min(e["ts"] for e in gpu), max(e["ts"] + e["dur"] for e in gpu)]] if gpu else []
    sampled, n_traced, n_calls = traced_calls(xs, gpu)
    if sampled is not None:
        win = [[lo, hi] for lo, hi, _, _ in intersect([tuple(w) for w in win],
                                                      [tuple(w) for w in sampled])]
    win_total = sum(b - a for a, b in win)

    def in_window(e):
        a, b = e["ts"], e["ts"] + e["dur"]
        return sum(max(0.0, min(b, w1) - max(a, w0)) for w0, w1 in win) if win else 0.0

    per_kernel = defaultdict(lambda: [0, 0.0])
    for e in gpu:
        d = in_window(e)
        if d > 0 or (e["dur"] == 0 and win):
            k = per_kernel[(e["cat"], e["name"])]
            k[0] += 1
            k[1] += d
    # Kernels may overlap (programmatic dependent launch, side streams): their sum can exceed
    # the busy time, so each kernel's share is of the sum.
    kernel_total = sum(v[1] for v in per_kernel.values())
    busy = merge([[e["ts"], e["ts"] + e["dur"]] for e in gpu])
    busy_in = [(lo, hi) for lo, hi, _, _ in intersect([tuple(w) for w in win], [tuple(b) for b in busy])]
    busy_total = sum(b - a for a, b in busy_in)
    # Idle = window minus busy.
    idle = []
    for w0, w1 in win:
        t = w0
        for a, b in busy_in:
            if b <= w0 or a >= w1:
                continue
            if a > t:
                idle.append((t, a))
            t = max(t, b)
        if t < w1:
            idle.append((t, w1))
    segs = innermost_segments(main_spans)
    idle_by = defaultdict(float)
    covered = 0.0
    for lo, hi, _, seg in intersect(idle, segs):
        idle_by[seg[2] or "(no span on the main thread)"] += hi - lo
        covered += hi - lo
    idle_total = sum(b - a for a, b in idle)
    if idle_total - covered > 1e-6:
        idle_by["(no span on the main thread)"] += idle_total - covered

    waits = defaultdict(lambda: [0, 0.0])
    syncs = defaultdict(lambda: [0, 0.0])
    reads = [0, 0.0, 0]
    for e in xs:
        cat, name, args = e.get("cat"), e["name"], e.get("args", {})
        if cat == "experts" and name == "wait":
            w = waits[args.get("layer", -1)]
            w[0] += 1
            w[1] += e["dur"]
        elif cat == "cuda" and name == "host sync":
            s = syncs[args.get("layer", -1)]
            s[0] += 1
            s[1] += e["dur"]
        elif cat == "io" and name == "read":
            reads[0] += 1
            reads[1] += e["dur"]
            reads[2] += args.get("bytes", 0)
    return {
        "window": (window or "GPU activity") + (
            f" (the {n_traced} of {n_calls} forward calls the GPU recorded)"
            if sampled is not None else ""),
        "forward_calls": n_calls,
        "forward_calls_gpu_traced": n_traced,
        "window_ms": win_total / 1e3,
        "gpu_busy_ms": busy_total / 1e3,
        "gpu_idle_ms": idle_total / 1e3,
        "gpu_events": len(gpu),
        "kernels": sorted(({"category": c, "name": n, "count": v[0], "total_ms": v[1] / 1e3,
                            "mean_us": v[1] / v[0] if v[0] else 0.0,
                            "share": v[1] / kernel_total if kernel_total else 0.0}
                           for (c, n), v in per_kernel.items()), key=lambda k: -k["total_ms"]),
        "idle_by_cpu_span": sorted(({"span": k, "ms": v / 1e3,
                                     "share_of_idle": v / idle_total if idle_total else 0.0}
                                    for k, v in idle_by.items()), key=lambda k: -k["ms"]),
        "expert_waits_by_layer": [{"layer": k, "count": v[0], "total_ms": v[1] / 1e3}
                                  for k, v in sorted(waits.items())],
        "host_syncs_by_layer": [{"layer": k, "count": v[0], "total_ms": v[1] / 1e3}
                                for k, v in sorted(syncs.items())],
        "expert_reads": {"count": reads[0], "total_ms": reads[1] / 1e3, "bytes": reads[2]},
    }


def short(name, width):
    return name if len(name) <= width else name[: width - 1] + "…"


def print_text(s, top):
    print(f"window: {s['window']}, {s['window_ms']:.3f} ms; GPU busy {s['gpu_busy_ms']:.3f} ms, "
          f"idle {s['gpu_idle_ms']:.3f} ms ({s['gpu_events']} GPU events in the trace)")
    print()
    print("GPU time per kernel")
    if not s["kernels"]:
        print("  (no GPU events: a CPU run, or CUPTI was missing; see the trace's otherData)")
    else:
        print(f"  {'kernel':<72} {'count':>7} {'total ms':>10} {'mean us':>9} {'share':>6}")
        for k in s["kernels"][:top]:
            label = k["name"] if k["category"] == "gpu kernel" else f"[{k['name']}]"
            label = label.replace("rw::cuda::", "")
            print(f"  {short(label, 72):<72} {k['count']:>7} {k['total_ms']:>10.3f} "
                  f"{k['mean_us']:>9.2f} {100 * k['share']:>5.1f}%")
        if len(s["kernels"]) > top:
            rest = s["kernels"][top:]
            print(f"  {'(' + str(len(rest)) + ' more)':<72} {sum(k['count'] for k in rest):>7} "
                  f"{sum(k['total_ms'] for k in rest):>10.3f}")
    print()
    print("GPU idle time by what the CPU (main thread) was doing")
    if not s["idle_by_cpu_span"]:
        print("  (none)")
    for i in s["idle_by_cpu_span"][:top]:
        print(f"  {short(i['span'], 60):<60} {i['ms']:>10.3f} ms {100 * i['share_of_idle']:>5.1f}%")
    print()
    print("I/O wait by layer (expert waits on the compute threads)")
    if not s["expert_waits_by_layer"]:
        print("  (no expert waits)")
    for w in s["expert_waits_by_layer"]:
        print(f"  layer {w['layer']:>3}: {w['count']:>7} waits {w['total_ms']:>10.3f} ms")
    r = s["expert_reads"]
    print(f"  expert reads: {r['count']} reads, {r['bytes'] / 1e6:.1f} MB, {r['total_ms']:.3f} ms "
          "on the I/O threads")
    if s["host_syncs_by_layer"]:
        n = sum(x["count"] for x in s["host_syncs_by_layer"])
        t = sum(x["total_ms"] for x in s["host_syncs_by_layer"])
        print(f"  CUDA host syncs: {n}, {t:.3f} ms waiting for the GPU")


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--window", help="only the main thread's spans of this name, e.g. decode")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        _, events = load(a.trace)
    except (OSError, ValueError, KeyError) as err:
        print(f"trace_summary.py: {a.trace}: {err}", file=sys.stderr)
        return 1
    s = summarize(events, a.window)
    if a.json:
        print(json.dumps(s, indent=2))
    else:
        print_text(s, a.top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
