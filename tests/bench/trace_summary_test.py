#!/usr/bin/env python3
"""tools/trace_summary.py on a hand-made trace: GPU time per kernel, the GPU's idle gaps split
by the main thread's innermost span, and expert waits by layer."""
import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import trace_summary as ts  # noqa: E402


def X(name, cat, ts_, dur, tid, **args):
    e = {"name": name, "cat": cat, "ph": "X", "ts": ts_, "dur": dur, "pid": 1, "tid": tid}
    if args:
        e["args"] = args
    return e


EVENTS = [
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main (os tid 5)"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "expert-io (os tid 6)"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 3, "args": {"name": "GPU 0 stream 7"}},
    # Main thread: decode [0, 100) holding a forward call [0, 60) holding a host sync [40, 60).
    X("decode", "bench", 0, 100, 1),
    X("forward call", "cuda", 0, 60, 1),
    X("host sync", "cuda", 40, 20, 1, layer=2),
    X("wait", "experts", 60, 10, 1, layer=3, expert=5),
    X("wait", "experts", 75, 5, 1, layer=3, expert=1),
    X("wait", "experts", 90, 2, 1, layer=0, expert=1),
    X("read", "io", 60, 9, 2, bytes=4096),
    # GPU: kernels at [10, 30) and [30, 50) (two of "a"), [70, 80) "b", a copy [90, 95).
    X("a", "gpu kernel", 10, 20, 3, blocks=1, threads=32),
    X("a", "gpu kernel", 30, 20, 3, blocks=1, threads=32),
    X("b", "gpu kernel", 70, 10, 3),
    X("copy device to host", "gpu copy", 90, 5, 3, bytes=64),
]


class Summary(unittest.TestCase):
    def test_numbers(self):
        s = ts.summarize(EVENTS)
        # Window: the GPU's first start to its last end, [10, 95).
        self.assertAlmostEqual(s["window_ms"], 0.085)
        self.assertAlmostEqual(s["gpu_busy_ms"], 0.055)
        self.assertAlmostEqual(s["gpu_idle_ms"], 0.030)
        k = {x["name"]: x for x in s["kernels"]}
        self.assertEqual(k["a"]["count"], 2)
        self.assertAlmostEqual(k["a"]["total_ms"], 0.040)
        self.assertAlmostEqual(k["a"]["mean_us"], 20.0)
        self.assertEqual(k["b"]["count"], 1)
        self.assertEqual(k["copy device to host"]["category"], "gpu copy")
        # Idle [50, 70): the host sync until 60, then the wait [60, 70); idle [80, 90): only
        # decode is open (the second wait ended at 80).
        idle = {x["span"]: x["ms"] for x in s["idle_by_cpu_span"]}
        self.assertAlmostEqual(idle["cuda/host sync"], 0.010)
        self.assertAlmostEqual(idle["experts/wait"], 0.010)
        self.assertAlmostEqual(idle["bench/decode"], 0.010)
        self.assertAlmostEqual(sum(idle.values()), s["gpu_idle_ms"])
        waits = {w["layer"]: w for w in s["expert_waits_by_layer"]}
        self.assertEqual(waits[3]["count"], 2)
        self.assertAlmostEqual(waits[3]["total_ms"], 0.015)
        self.assertAlmostEqual(waits[0]["total_ms"], 0.002)
        self.assertEqual(s["expert_reads"], {"count": 1, "total_ms": 0.009, "bytes": 4096})
        self.assertEqual(s["host_syncs_by_layer"], [{"layer": 2, "count": 1, "total_ms": 0.02}])

    def test_window(self):
        s = ts.summarize(EVENTS, window="decode")
        self.assertAlmostEqual(s["window_ms"], 0.100)
        self.assertAlmostEqual(s["gpu_idle_ms"], 0.045)  # [0,10) [50,70) [80,90) [95,100)

    def test_sampled_calls(self):
        # Three decode calls; the GPU recorded the first and the third (gpu_traced 1), so the
        # second call's time is not GPU idle time: only [start, next call) of recorded calls is.
        ev = [
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
            X("forward call", "cuda", 0, 10, 1, tokens=1, gpu_traced=1),
            X("forward call", "cuda", 20, 10, 1, tokens=1, gpu_traced=0),
            X("forward call", "cuda", 40, 10, 1, tokens=1, gpu_traced=1),
            X("k", "gpu kernel", 2, 6, 3),
            X("k", "gpu kernel", 42, 6, 3),
        ]
        s = ts.summarize(ev)
        # GPU activity [2, 48) ∩ ([0, 20) ∪ [40, 50)) = [2, 20) ∪ [40, 48): 26 us, 12 busy.
        self.assertAlmostEqual(s["window_ms"], 0.026)
        self.assertAlmostEqual(s["gpu_busy_ms"], 0.012)
        self.assertAlmostEqual(s["gpu_idle_ms"], 0.014)
        self.assertEqual((s["forward_calls"], s["forward_calls_gpu_traced"]), (3, 2))
        self.assertIn("2 of 3 forward calls", s["window"])
        # Every call recorded (or no gpu_traced argument, as in older traces): the whole span.
        for e in ev:
            e.get("args", {}).pop("gpu_traced", None)
        s = ts.summarize(ev)
        self.assertAlmostEqual(s["window_ms"], 0.046)
        self.assertEqual(s["forward_calls_gpu_traced"], 3)

    def test_cli_text_and_json(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.json")
            with open(p, "w") as f:
                json.dump({"traceEvents": EVENTS}, f)
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(ts.main([p]), 0)
            text = out.getvalue()
            self.assertIn("GPU time per kernel", text)
            self.assertIn("GPU idle time by what the CPU", text)
            self.assertIn("layer   3:       2 waits", text)
            out = io.StringIO()
            with redirect_stdout(out):
                self.assertEqual(ts.main([p, "--json"]), 0)
            self.assertEqual(json.loads(out.getvalue())["gpu_events"], 4)


if __name__ == "__main__":
    unittest.main()
