"""When each pipeline of a sample's programs was asked for, its WGSL checked and the pipeline
made, on the trainer page's first visit (a fresh browser profile): the step's, the initial
values' and each attached program's (gpu.mjs's Runtime.pipelineTimes, the worker's clock).

    python3 build.py bundle && .venv/bin/python tools/pipeline_times.py [--site DIR] [--top N]
        [--repeat] [SAMPLE]

Prints the page's compile time and first loss, then each program's pipelines as one line
(how many, when asked for, checked and made, in ms since the page's navigation) and the
slowest pipelines (made less asked). --repeat: the same of a repeat visit (the first visit
kept open until it has kept its Python snapshot, then a second in the same profile), where
the last visit's pipelines are asked for (prewarmed) while Python starts, and the line
"Ready" says when Python was. Chromium checks the texts one after another before the
driver compiles each, in parallel; the programs' lines show which waited for which. For a
first visit's figures on a real GPU, remove the driver's shader cache first (NVIDIA:
~/.nv, ~/.cache/nvidia); launch.sh exports GPU_CHROMIUM (the adapter is printed).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repeat_visit import FIRST_LOSS, _build, visit  # noqa: E402

# the pipelines' times of the sample's programs: [[label, [[kernel, chars, asked, checked, made]]]]
COLLECT = """
from tgweb.backends import browser

def _times(label, engine):
    rt = getattr(getattr(engine, "rt", None), "_rt", None)
    if isinstance(rt, browser._Deferred):
        rt = rt.now()  # an attached program's: its pipelines waited for here
    made = getattr(rt, "pipelineTimes", None) if rt is not None else None
    if made is None:
        return None
    rows = [[str(t.kernel), int(t.chars), float(t.asked), float(getattr(t, "checked", 0.0) or 0.0),
             float(getattr(t, "made", 0.0) or 0.0)] for t in made]
    return [label, rows]

import js

_t = _spaces[SAMPLE]["trainer"]
_out = [_times("step", _t.engine)]
if _t._initial is not None:
    _out.append(_times("initial values", _t._initial._engine))
for _a in _t._attached:
    _name = getattr(getattr(_a, "_fn", None), "__name__", type(_a).__name__)
    _out.append(_times(f"attached: {_name}", getattr(_a, "_engine", None)))
{"origin": float(js.performance.timeOrigin), "programs": [o for o in _out if o is not None]}
"""


def table(programs: list, top: int, t0: float) -> str:
    """programs: [[label, rows]]; each row's times less t0 (the page's navigation, on the
    worker's clock)."""
    lines = [f"{'program':28s}{'pipelines':>10s}{'asked':>14s}{'checked by':>12s}{'made by':>10s}"]
    for label, rows in programs:
        asked = f"{min(r[2] for r in rows) - t0:.0f}-{max(r[2] for r in rows) - t0:.0f}"
        checked = max(r[3] for r in rows) - t0
        made = max(r[4] for r in rows) - t0
        lines.append(f"{label[:27]:28s}{len(rows):10d}{asked:>14s}{checked:12.0f}{made:10.0f}")
    every = sorted((r[4] - r[2], label, r) for label, rows in programs for r in rows)[::-1][:top]
    lines.append(f"slowest {len(every)} (ms from asked to made):")
    for ms, label, (kernel, chars, *_) in every:
        lines.append(f"  {ms:7.0f}  {kernel[:44]:44s} {chars:7d} chars  ({label})")
    return "\n".join(lines)


def main(sample: str, site: Path, top: int, repeat: bool = False) -> None:
    from playwright.sync_api import sync_playwright

    build = _build()
    if not (site / "manifest.json").exists():
        build.bundle_site()
    srv = build.make_server(site, 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    exe, args = build.chromium()
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=exe, args=args, headless=True)
        try:
            if repeat:
                visit(ctx, url, sample, keep=True)
            page = ctx.new_page()
            page.goto(f"{url}/?autostart#{sample}")
            page.wait_for_function(FIRST_LOSS, arg=sample, timeout=600_000, polling=10)
            first = page.evaluate("performance.now()") / 1000
            info = page.evaluate(f"window.app.state[{json.dumps(sample)}].info")
            a = page.evaluate("window.app.tg.info.adapter")
            ready = page.evaluate("window.app.tg.info.timings.since_page_load.ready")
            # the worker answers tg.run once the training it runs has stopped
            page.click("#stop")
            page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
            origin = page.evaluate("performance.timeOrigin")
            got = page.evaluate(
                "([src, name]) => window.app.tg.run(src, { globals: { SAMPLE: name } })", [COLLECT, sample]
            )
        finally:
            ctx.close()
    print(f"adapter: {a.get('vendor')} {a.get('architecture')} {a.get('description')}")
    visit_name = "repeat visit" if repeat else "first visit"
    print(f"{sample}, {visit_name}: Ready at {ready / 1000:.2f} s,", end=" ")
    print(f"compiled in the page in {info['compile_s']:.2f} s, first loss at {first:.2f} s")
    print("(the pipelines' times below: ms since navigation)")
    print(table(got["programs"], top, origin - got["origin"]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, help="a bundled site (default: site/)")
    ap.add_argument("--top", type=int, default=8, help="how many of the slowest pipelines to list")
    ap.add_argument("--repeat", action="store_true", help="a repeat visit's (the first kept open first)")
    ap.add_argument("sample", nargs="?", default="shakespeare")
    a = ap.parse_args()
    main(a.sample, (a.site or _build().SITE).resolve(), a.top, a.repeat)
