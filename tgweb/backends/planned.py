"""The browser backend planned in CPython for an adapter described, without one: what a
served site's shipped Programs are made with (tools/ship_programs.py, build.py's bundle).

An adapter is described as the browser's worker sees it: {"info": its adapter info (the
worker's adapterInfo: vendor, architecture, the optional features offered, subgroup sizes),
"limits": the device's limits}, which a page gives as `tg.run("tgweb.backends.browser.
describe()")`. Inside planning(adapter), compile, attach and the initial values plan for the
"browser" backend on that adapter (its Target and limits, as its worker would), so their
cache keys and Programs are the ones a visit on that adapter computes; each Runtime then is
a Runtime of this module's, which keeps its Program and runs nothing (a read gives zeros).
Nothing trains inside: it is for making Programs, never results.
"""

from __future__ import annotations

import array
import contextlib
import contextvars
from typing import Any

from ..arrays import TYPECODE
from ..codegen.target import Target, classify
from ..ir import prod
from ..program import LIMITS, Program
from . import base

_adapter: contextvars.ContextVar = contextvars.ContextVar("tgweb_planned_adapter", default=None)


def check(adapter: Any) -> dict:
    """An adapter's description checked: {"info": dict, "limits": {name: int}} holding every
    limit Programs depend on (ValueError naming what is missing or wrong)."""
    if not isinstance(adapter, dict) or not isinstance(adapter.get("info"), dict):
        raise ValueError(
            f"an adapter is described as {{'info': {{...}}, 'limits': {{...}}}}, got {adapter!r:.200}"
        )
    limits = adapter.get("limits")
    if not isinstance(limits, dict):
        raise ValueError("the adapter's 'limits' must be a dict of limit name -> int")
    missing = [n for n in LIMITS if not (isinstance(limits.get(n), int) and limits[n] > 0)]
    if missing:
        raise ValueError(f"the adapter's limits lack (or give no positive int for) {missing}")
    return {"info": adapter["info"], "limits": {n: limits[n] for n in LIMITS}}


@contextlib.contextmanager
def planning(adapter: dict):
    """Inside: the browser backend is `adapter`'s (check's form), planned without it."""
    token = _adapter.set(check(adapter))
    try:
        yield
    finally:
        _adapter.reset(token)


def active() -> bool:
    return _adapter.get() is not None


def device_limits() -> dict[str, int]:
    return dict(_adapter.get()["limits"])


def device_target() -> Target:
    return classify(_adapter.get()["info"])


class Runtime(base.Runtime):
    """A Program kept, not run: writes are checked for size and dropped, reads give zeros."""

    name = "planned"

    def __init__(self, program: Program, shared: dict[str, Any] | None = None) -> None:
        self.program = program

    def _slot(self, kind: str, name: str):
        return getattr(self.program, kind)[name]

    def write(self, kind: str, name: str, data: array.array) -> None:
        n = prod(self._slot(kind, name).shape)
        if len(memoryview(data).cast("B")) != 4 * n:
            raise ValueError(f"{kind} {name!r}: {len(data)} values for a slot of {n}")

    def read(self, kind: str, name: str) -> array.array:
        s = self._slot(kind, name)
        return array.array(TYPECODE[s.dtype], bytes(4 * prod(s.shape)))

    def submit(self, inputs, scalars, read):
        got = {(k, n): self.read(k, n) for k, n in read}
        return lambda: got

    def param_handle(self, name: str) -> Any:
        return name

    def close(self) -> None:
        pass
