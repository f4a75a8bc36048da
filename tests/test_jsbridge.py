"""tgweb.jsbridge outside a browser: the awaitable calls (written for a Pyodide without JSPI)
run anywhere and give what the synchronous ones give; the browser backend, asked for in
CPython, says it runs in Pyodide. (In Pyodide: tests/browser/test_any_pyodide.py.)"""

from __future__ import annotations

import asyncio
import concurrent.futures

import pytest

import tgweb as tg
from tgweb import jsbridge
from tgweb.samples import sin


def _trainer():
    return tg.compile(
        sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, backend="reference"
    )


def _run(coro):
    """asyncio.run on a thread of its own: in the same process the browser tests' playwright
    keeps an event loop running on this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def test_awaitable_calls_match_the_synchronous_ones():
    sync, awaited = _trainer(), _trainer()
    want = [sync.step(**sin.batch(i)).loss for i in range(12)]  # past DEPTH steps in flight

    async def run():
        out = []
        for i in range(12):
            r = await awaited.step_async(**sin.batch(i))
            out.append(await r.loss_async)
        assert (await r.wait_async()) is r and r.ready
        return out, await jsbridge.call(awaited.params)

    got, params = _run(run())
    assert got == want and awaited.steps == sync.steps == 12
    assert sorted(params) == sorted(sync.params())


def test_call_passes_arguments_and_errors_through():
    assert _run(jsbridge.call(divmod, 7, 2)) == (3, 1)
    with pytest.raises(ZeroDivisionError):
        _run(jsbridge.call(divmod, 1, 0))


def test_browser_backend_in_cpython_says_it_runs_in_pyodide():
    with pytest.raises(ImportError, match="runs in Pyodide"):
        tg.compile(sin.Model(), sin.loss_fn, inputs=sin.INPUTS, optimizer=sin.OPTIMIZER, backend="browser")
