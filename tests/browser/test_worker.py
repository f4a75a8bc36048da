# ruff: noqa: E501  (JavaScript and WGSL embedded in strings)
"""The worker: Pyodide + tgweb load, run() results, events, errors, stop."""

from __future__ import annotations

from .conftest import COLD_START, open_harness, py, run_py, site_file


def test_pyodide_and_tgweb_load(page):
    info = COLD_START["info"]
    assert info["tgweb"] == py(page, "import tgweb; tgweb.__version__")
    assert info["python"].startswith("3.14")
    assert info["adapter"]["vendor"] or info["adapter"]["architecture"] or info["adapter"]["description"]
    assert info["limits"]["maxStorageBuffersPerShaderStage"] >= 8
    assert py(page, "import sys; sys.version_info[:2]") == [3, 14]
    # the browser path works without NumPy
    assert py(page, "import importlib.util; importlib.util.find_spec('numpy') is None") is True
    assert py(page, "from tgweb.backends import browser; browser.available()") is True
    assert py(page, "import pyodide.ffi; pyodide.ffi.can_run_sync()") is True


def test_result_is_json_of_last_expression(page):
    assert py(page, "1 + 2") == 3
    assert py(page, "x = 5") is None
    assert py(page, "x * 2") == 10  # one persistent namespace across runs
    assert py(page, "{'a': (1, 2.5), 'b': [None, True, 'x'], 3: float('nan')}") == {
        "a": [1, 2.5],
        "b": [None, True, "x"],
        "3": None,
    }
    assert py(page, "import array; array.array('f', [1.5, 2.0])") == [1.5, 2.0]
    assert py(page, "import tgweb, array; tgweb.Array(array.array('f', [1, 2, 3, 4]), (2, 2), 'f32')") == [
        [1.0, 2.0],
        [3.0, 4.0],
    ]


def test_javascript_null_from_the_page_is_none(page):
    """Issue 36: null handed to Python (tg.run's globals, a view's call arguments: alone, in
    objects, in arrays) is None, not pyodide.ffi.jsnull; a config with a null in it, such as
    max_memory, reaches tgweb as None. Typed arrays still arrive as JS, without a copy."""
    got = page.evaluate(
        """async () => window.tg.run(
            `[x is None, o["a"] is None, o["b"] == [1, None], o["c"]["d"] is None, type(o).__name__,
              type(t).__name__, cfg["max_memory"] is None]`,
            {globals: {x: null, o: {a: null, b: [1, null], c: {d: null}}, t: new Float32Array([1, 2]),
                       cfg: {max_memory: null}}})"""
    )
    assert got == [True, True, True, True, "dict", "JsProxy", True]
    # the config's None is taken as "no budget" where a jsnull was refused
    assert (
        py(
            page,
            "import tgweb as tg\nfrom tgweb import samples\n"
            "tr = samples.compile('sin', backend='browser', max_memory=cfg['max_memory'])\n"
            "tr.close()\n'ok'",
        )
        == "ok"
    )


def test_top_level_await(page):
    assert py(page, "import asyncio\nawait asyncio.sleep(0.01)\n'slept'") == "slept"
    # a JS promise awaited synchronously (JSPI): what the browser backend does on readback
    assert py(page, "from pyodide.ffi import run_sync\nimport js\nrun_sync(js.Promise.resolve(41)) + 1") == 42


def test_events_reach_the_page(page):
    page.evaluate("window.events = []")
    py(
        page,
        "from tgweb import worker\n"
        "for i in range(3):\n"
        "    worker.progress(i + 1, 3, loss=1.0 / (i + 1))\n"
        "    worker.metric('loss', 1.0 / (i + 1), step=i)\n"
        "worker.log('hello', 42)\n"
        "worker.emit('custom', {'k': [1, 2]})\n"
        "print('printed line')\n",
    )
    events = page.evaluate("window.events")
    prog = [d for e, d in events if e == "progress"]
    assert [p["step"] for p in prog] == [1, 2, 3] and prog[0]["total"] == 3 and prog[2]["loss"] == 1 / 3
    mets = [d for e, d in events if e == "metric"]
    assert [(m["name"], m["step"]) for m in mets] == [("loss", 0), ("loss", 1), ("loss", 2)]
    logs = [d for e, d in events if e == "log"]
    assert {"stream": "tgweb", "level": "info", "text": "hello 42"} in logs
    assert any(d["stream"] == "stdout" and d["text"] == "printed line" for d in logs)
    assert ["custom", {"k": [1, 2]}] in events


def test_python_exception_has_traceback_and_line(page):
    src = "def inner(v):\n    return 1 / v\n\ndef outer():\n    return inner(0)\n\nouter()\n"
    status, err = run_py(page, src, filename="mymodel.py")
    assert status == "error"
    assert err["name"] == "PythonError" and err["pyType"] == "ZeroDivisionError"
    msg = err["message"]
    assert msg.startswith("Traceback (most recent call last):")
    assert 'File "mymodel.py", line 7' in msg and 'File "mymodel.py", line 2, in inner' in msg
    assert "ZeroDivisionError: division by zero" in msg
    assert "_pyodide" not in msg  # Pyodide's own frames are trimmed
    assert err["line"] == 2
    # the worker stays usable
    assert py(page, "'still alive'") == "still alive"


def test_syntax_error_is_reported(page):
    status, err = run_py(page, "x = (1,\n", filename="bad.py")
    assert status == "error" and err["pyType"] == "SyntaxError"
    assert "bad.py" in err["message"]


def test_stop_interrupts_a_running_script(page):
    # a pure-Python loop that checks for the stop request (and is interruptible), written
    # with tgweb.worker's older name, as scripts saved before the rename are
    page.evaluate("""() => { window.stopRun = window.tg.run(
        "from tgweb import web\\nimport time\\nn = 0\\nwhile True:\\n    n += 1\\n    web.check_stop()\\n"
      ).then(v => ['ok', v], e => ['error', {message: e.message, stopped: e.stopped, pyType: e.pyType}]); }""")
    page.wait_for_timeout(300)
    page.evaluate("window.tg.stop()")
    status, err = page.evaluate("window.stopRun")
    assert status == "error" and err["stopped"] is True, err
    assert py(page, "n > 0") is True


def test_no_webgpu_gives_a_clear_error(browser, site_url):
    hide = "Object.defineProperty(Navigator.prototype, 'gpu', {get: () => undefined, configurable: true});"
    p = open_harness(browser, site_url, init_script=hide)
    try:
        r = p.evaluate("""async () => {
            const t = performance.now();
            try { await tgweb.start({timeout: 20000}); return ['started']; }
            catch (e) { return [e.name, e.message, performance.now() - t]; } }""")
        assert r[0] == "NoWebGPU" and "WebGPU" in r[1] and r[2] < 5000, r
    finally:
        p.close()


def test_no_adapter_in_worker_gives_a_clear_error(browser, site_url):
    """WebGPU present but requestAdapter() gives null (a blocklisted GPU): start() rejects
    with a clear message instead of hanging."""
    p = open_harness(browser, site_url)
    try:

        def worker(route):
            body = route.fetch().text()
            patch = "navigator.gpu.requestAdapter = async () => null;\n"
            route.fulfill(
                status=200,
                body=patch + body,
                headers={
                    "Content-Type": "text/javascript",
                    "Cross-Origin-Embedder-Policy": "require-corp",
                    "Cross-Origin-Resource-Policy": "same-origin",
                },
            )

        p.route(site_file("worker.mjs"), worker)
        r = p.evaluate("""async () => {
            try { await tgweb.start({timeout: 60000}); return ['started']; }
            catch (e) { return [e.name, e.message, e.fatal]; } }""")
        assert r[0] == "ProgramError" and "no GPU adapter" in r[1] and r[2] is True, r
    finally:
        p.close()


def test_a_prelude_runs_before_start_resolves(browser, site_url):
    """start({prelude}) runs the page's own Python as the worker is ready (its source may
    still be on its way: a promise), before start() resolves, as a file (run({file: true}):
    top-level await allowed, no value); a prelude that fails rejects start() with its
    Python error, naming its file."""
    p = open_harness(browser, site_url)
    try:
        r = p.evaluate("""async () => {
            const source = new Promise((res) => setTimeout(() => res("def helper():\\n    return 42\\n"), 50));
            const tg = await tgweb.start({prelude: {source, filename: "helpers.py"}});
            const got = [await tg.run("helper()")];
            // a file's run: top-level await allowed, no value
            got.push(await tg.run("import asyncio\\nawait asyncio.sleep(0)\\nz = helper() + 1\\nz", { file: true }));
            got.push(await tg.run("z"));
            tg.close();
            try {
                await tgweb.start({prelude: {source: "x = 1\\nraise ValueError('bad helper')", filename: "helpers.py"}});
                return [got, "started"];
            } catch (e) { return [got, e.name, e.pyType, e.message, e.line]; } }""")
        assert r[0] == [42, None, 43], r
        assert r[1] == "PythonError" and r[2] == "ValueError" and "bad helper" in r[3], r
        assert "helpers.py" in r[3] and r[4] == 2, r
        # the traceback starts at the prelude's file: not at the frames that ran it as one
        assert "run_file" not in r[3] and r[3].count('File "') == 1, r[3]
    finally:
        p.close()
