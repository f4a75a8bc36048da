"""tools/trace_visit.py's reading of a trace: the wasm's stream and V8's steps with it
on the thread that streamed it (the tgweb worker's), Pyodide's module scripts compiled
there (and the code taken from V8's cache), its long tasks, in ms since the page's
navigation; other threads, short tasks and later navigations left out."""

import importlib.util
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[1] / "tools"
sys.path.insert(0, str(TOOLS))  # trace_visit imports repeat_visit beside it
_spec = importlib.util.spec_from_file_location("trace_visit", TOOLS / "trace_visit.py")
trace_visit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(trace_visit)


def ev(name, ts_ms, tid=7, dur_ms=None, ph="X", data=None):
    e = {"name": name, "ts": 1000 * ts_ms, "tid": tid, "ph": ph}
    if dur_ms is not None:
        e["dur"] = 1000 * dur_ms
    if data is not None:
        e["args"] = {"data": data}
    return e


ASM = "http://127.0.0.1:8000/pyodide/pyodide.asm.mjs"


def test_the_worker_threads_wasm_and_long_tasks():
    events = [
        ev("navigationStart", 5, tid=1, ph="R"),
        ev("navigationStart", 10, tid=1, ph="R"),  # the page's: the last before the stream
        ev("wasm.StartStreamingCompilation", 110, dur_ms=0.1),
        ev("wasm.OnBytesReceived", 120),
        ev("wasm.OnBytesReceived", 125, tid=9),  # another thread's module
        ev("wasm.OnBytesReceived", 310),
        ev("v8.compileModule", 150, dur_ms=30),
        ev("v8.compileModule", 160, dur_ms=1, data={"url": ASM, "consumedCacheSize": 685816}),
        ev("v8.compileModule", 165, dur_ms=1, data={"url": "http://127.0.0.1:8000/app.mjs"}),  # not Pyodide's
        ev("v8.compileModule", 170, tid=9, dur_ms=40, data={"url": ASM}),  # another thread's
        ev("v8.callFunction", 200, dur_ms=2),  # short: left out
        ev("v8.callFunction", 205, tid=9, dur_ms=50),  # another thread: left out
        ev("wasm.FinishStreaming", 311, dur_ms=20),
        ev("wasm.Deserialize", 332, dur_ms=6),
        ev("wasm.SyncInstantiate", 340, dur_ms=1),  # a small module's: left out
        ev("wasm.SyncInstantiate", 350, dur_ms=12),
        ev("MajorGC", 400, dur_ms=9),
        ev("navigationStart", 900, tid=1, ph="R"),  # a later page
    ]
    got = trace_visit.wasm_timeline(events, long_ms=8)
    assert got == {
        "scripts": [(150.0, 1.0, "pyodide.asm.mjs", 685816)],
        "stream": 100.0,
        "bytes": (110.0, 300.0),
        "code_cache": True,
        "steps": [
            (301.0, 20.0, "wasm.FinishStreaming"),
            (322.0, 6.0, "wasm.Deserialize"),
            (340.0, 12.0, "wasm.SyncInstantiate"),
        ],
        "tasks": [(140.0, 30.0, "v8.compileModule"), (390.0, 9.0, "MajorGC")],
    }
    no_cache = [e for e in events if e["name"] != "wasm.Deserialize"]
    assert trace_visit.wasm_timeline(no_cache, long_ms=8)["code_cache"] is False
    assert trace_visit.wasm_timeline([e for e in events if "Streaming" not in e["name"]], 8) == {}


def test_the_threads_cpu_time_from_navigation_to_the_first_loss():
    """thread_cpu: each thread's top-level tasks' thread time within the window (navigation
    to the first loss; a task across an end in proportion), named by the trace's metadata,
    busiest first, and the sum; other categories and tasks without a thread time left out."""

    def task(ts_ms, dur_ms, cpu_ms, pid=1, tid=7, cat="toplevel"):
        return {
            "name": "RunTask",
            "cat": cat,
            "ph": "X",
            "pid": pid,
            "tid": tid,
            "ts": 1000 * ts_ms,
            "dur": 1000 * dur_ms,
            "tdur": 1000 * cpu_ms,
        }

    events = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "Renderer"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 7, "args": {"name": "DedicatedWorker thread"}},
        {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "GPU Process"}},
        {
            "name": "thread_name",
            "ph": "M",
            "pid": 2,
            "tid": 3,
            "args": {"name": "ThreadPoolForegroundWorker"},
        },
        ev("navigationStart", 10, tid=1, ph="R"),
        ev("wasm.StartStreamingCompilation", 110, dur_ms=0.1),
        task(0, 20, 10),  # half of it after the navigation: 5 ms
        task(50, 30, 30),
        task(100, 40, 20, pid=2, tid=3),
        task(200, 100, 100, pid=2, tid=3),  # its first 10 ms before the first loss: 10 ms
        task(60, 5, 5, cat="v8"),  # not a top-level task
        untimed := task(70, 5, 5),  # without a thread time (below): left out
    ]
    del untimed["tdur"]
    got = trace_visit.thread_cpu(events, until_ms=200)
    assert got == {
        "threads": [
            ("Renderer", "DedicatedWorker thread", 35.0),
            ("GPU Process", "ThreadPoolForegroundWorker", 30.0),
        ],
        "total": 65.0,
    }
    assert trace_visit.thread_cpu([e for e in events if e["name"] != "navigationStart"], 200) == {}
