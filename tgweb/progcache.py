"""The compiled-Program cache: a repeat visit skips tracing, autodiff, lowering and WGSL.

tg.compile looks a training step up here when it knows what code built the model: its
`cache_key` argument, or the source given to `keyed(source)` around the code (the trainer
page wraps each sample's source so). The entry's key hashes that source (and which
compile call of it this is), tgweb's build (a hash of its own files, so that any change
of tgweb misses), the adapter class (the codegen Target: cpu/gpu, its tuning and
features, and the device limits lowering planned for) and the structure the Python
side still sees before tracing (parameter names and shapes, the inputs, the optimizer's
settings, compile's options). A hit gives the Program and a Skeleton of the graph (its
leaves: what the Trainer reads); the initial values are still drawn from the model's
Parameters by the Trainer, so a cached run trains exactly as an uncached one.

Trainer.attach's inference programs are cached too, when made inside a keyed() scope
(whose source holds the forward function's code) on a trainer whose Program was: their
key hashes the trainer's key (its source, build, adapter class and so its Program), the
scope's source, which attach call of the scope this is, the forward function's name and
the inputs. A FreeInference's sizes, compiled on first use outside any scope, are not.

An entry is text: a format line, the SHA-256 of the body, the body (JSON). An entry
whose checksum, JSON, Program or key does not hold is discarded and rebuilt, never run.
Stores: the browser worker's IndexedDB (web/progcache.mjs, reached through
tgweb.worker.hooks()), or a DirStore / MemoryStore set with use(); none in CPython unless
set. `last` records what the latest lookup did ("hit", "shipped", "miss", "corrupt: ...").
A served site may ship entries for its samples on the adapters it was built for
(tools/ship_programs.py, made in CPython by tgweb.backends.planned): the browser's store
answers a key it lacks from there, checked as any entry, and keeps it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .program import Program, ProgramError

FORMAT = "tgweb-program-cache 1"
last: dict[str, Any] = {}  # the latest lookup: {"key", "outcome", "label", "kind"}
log: list[dict] = []  # every lookup since keyed() was entered, in order (as `last`)
_store: Any = None  # set by use(); None: the browser's when in the worker, else no cache
_scope: contextvars.ContextVar = contextvars.ContextVar("tgweb_progcache_scope", default=None)


class Leaf:
    """A graph leaf as the Trainer reads it: shape, dtype and attrs."""

    __slots__ = ("shape", "dtype", "attrs")

    def __init__(self, shape, dtype: str, attrs: dict) -> None:
        self.shape, self.dtype, self.attrs = tuple(shape), dtype, attrs


class Skeleton:
    """What a Trainer reads of its graph, without the graph: the inputs, params, states,
    scalars, outputs and captures by name (as Leaf), whether it updates, its precision,
    and the inputs' index bounds (tgweb.step_data.index_bounds)."""

    def __init__(self, d: dict) -> None:
        def leaves(kind):
            return {n: Leaf(shape, dtype, {"name": n, **attrs}) for n, shape, dtype, attrs in d[kind]}

        self.inputs, self.params, self.states = leaves("inputs"), leaves("params"), leaves("states")
        self.scalars, self.outputs, self.captures = leaves("scalars"), leaves("outputs"), leaves("captures")
        self.updates = dict.fromkeys(d["updates"])
        self.precision = d["precision"]  # what attached inference programs are traced at
        self.bounds = {n: (b, where, frozenset(allowed)) for n, b, where, allowed in d["bounds"]}
        self.extra: dict = {}  # what the entry's maker stored beside it (Lookup.save)

    @staticmethod
    def describe(graph, bounds: dict) -> dict:
        """The JSON form of a graph's Skeleton."""

        def leaves(m):
            return [
                [n, list(t.shape), t.dtype, {k: v for k, v in t.attrs.items() if k in ("init", "buffer")}]
                for n, t in m.items()
            ]

        return {
            **{
                k: leaves(getattr(graph, k))
                for k in ("inputs", "params", "states", "scalars", "outputs", "captures")
            },
            "updates": list(graph.updates),
            "precision": graph.precision,
            "bounds": [[n, b, where, sorted(allowed)] for n, (b, where, allowed) in bounds.items()],
        }


class CorruptEntry(ValueError):
    """A cache entry that does not hold together (damaged, truncated, or not this key's)."""


def use(store: Any) -> None:
    """Cache Programs in `store` (get/put/delete by key: a DirStore, a MemoryStore, or
    None for the default: the page's IndexedDB in the browser, no cache in CPython)."""
    global _store
    _store = store


def current_store() -> Any:
    if _store is not None:
        return _store
    from . import worker

    js = worker.hooks().programCache if worker.in_browser() else None
    return BrowserStore(js) if hasattr(js, "get") else None  # none (or jsnull): not cached


@contextlib.contextmanager
def keyed(source: str, label: str = ""):
    """Inside: tg.compile caches by `source` (the code that builds the trainers), the
    n-th compile call under the n-th key. label names the entries (the page: the sample)."""
    if not isinstance(source, str):
        raise TypeError(f"keyed: source must be the code's text (a str), got {type(source).__name__}")
    token = _scope.set({"source": source, "label": label, "calls": 0, "attaches": 0})
    last.clear()
    log.clear()
    try:
        yield
    finally:
        _scope.reset(token)


# the JavaScript tgweb runs (tgweb.export.js_files: web/'s in a checkout, the wheel's copies)
BUILD_JS = ("bulk.mjs", "device.mjs", "gpu.mjs")


@functools.cache
def build_id() -> str:
    """SHA-256 of tgweb's own files (its Python, and the JavaScript it runs: the same from a
    checkout as from the wheel, which carries copies), so that any change of tgweb misses."""
    from .export import js_files

    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    for name, p in zip(BUILD_JS, js_files(BUILD_JS)):
        h.update(f"_{name}".encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _plain(x: Any) -> Any:
    """x as stable JSON data for the key: callables by their qualified name (their code
    is in the keyed source), other objects by their plain-data form or type name."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if hasattr(x, "to_dict"):
        return _plain(x.to_dict())
    if callable(x):
        return f"{getattr(x, '__module__', '')}.{getattr(x, '__qualname__', type(x).__name__)}"
    return type(x).__qualname__


def adapter_class(device: dict) -> dict:
    """What of the device the kernels depend on: its target's class, tuning, features and
    subgroup sizes, and the limits lowering planned for (not its vendor or name)."""
    meta = device["target"].to_meta()
    return {
        "target": {k: v for k, v in meta.items() if k not in ("vendor", "description")},
        "limits": device["limits"],
    }


def _digest(desc: dict) -> str:
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()


class Lookup:
    """One compile's (kind "step"), attach's (kind "forward") or a trainer's initial values
    (kind "initial") cache entry: its key, and
    load() / save() through the store. params: the model's parameter shapes by name."""

    def __init__(self, store, key: str, label: str, params: dict, kind: str = "step") -> None:
        self.store, self.key, self.label, self.params, self.kind = store, key, label, params, kind

    @classmethod
    def start(cls, cache_key, device, model, parts: dict) -> "Lookup | None":
        """The Lookup of a compile, or None where nothing is cached (no key, no store, the
        reference backend, or an optimizer whose build keeps host state)."""
        scope = _scope.get()
        if cache_key is None and scope is not None:
            cache_key = f"{scope['source']}\0call {scope['calls']}"
            scope["calls"] += 1
        store = current_store() if cache_key is not None and device is not None else None
        if store is None or not getattr(parts["optimizer"], "cacheable", False):
            return None
        params = {n: list(p.shape) for n, p in model.named_parameters()}
        desc = {
            "format": FORMAT,
            "tgweb": build_id(),
            "source": hashlib.sha256(str(cache_key).encode()).hexdigest(),
            "adapter": adapter_class(device),
            "params": params,
            "model": _plain(type(model)),
            **{k: _plain(v) for k, v in parts.items()},
        }
        return cls(store, _digest(desc), scope["label"] if scope else "", params)

    @classmethod
    def attach(cls, trainer, forward_fn, inputs: dict, device) -> "Lookup | None":
        """The Lookup of trainer.attach(forward_fn, inputs), or None where it is not cached
        (outside a keyed() scope, no store, or a trainer whose Program is not cached)."""
        scope, tkey = _scope.get(), trainer.cache_key
        store = current_store() if scope is not None and tkey is not None and device is not None else None
        if store is None:
            return None
        desc = {
            "format": FORMAT,
            "tgweb": build_id(),
            "trainer": tkey,
            "source": hashlib.sha256(scope["source"].encode()).hexdigest(),
            "attach": scope["attaches"],
            "adapter": adapter_class(device),
            "forward": _plain(forward_fn),
            "inputs": _plain(inputs),
        }
        scope["attaches"] += 1
        params = {n: list(p.shape) for n, p in trainer.model.named_parameters()}
        return cls(store, _digest(desc), scope["label"], params, kind="forward")

    @classmethod
    def initial(cls, trainer, what: dict, device) -> "Lookup | None":
        """The Lookup of a trainer's program of initial values (tgweb/initial.py; `what`:
        what it sets, plainly), or None where the trainer's Program is not cached."""
        store = current_store() if trainer.cache_key is not None and device is not None else None
        if store is None:
            return None
        desc = {
            "format": FORMAT,
            "tgweb": build_id(),
            "trainer": trainer.cache_key,
            "adapter": adapter_class(device),
            "initial": _plain(what),
        }
        params = {n: list(p.shape) for n, p in trainer.model.named_parameters()}
        scope = _scope.get()
        return cls(store, _digest(desc), scope["label"] if scope else "", params, kind="initial")

    def load(self, target) -> tuple[Skeleton, Program] | None:
        """The entry's (Skeleton, Program), or None on a miss; a corrupt entry is deleted.
        Outcomes: "hit", "shipped" (a hit on the site's shipped entry, now kept in the
        store), "miss", "corrupt: ..." ."""
        text = self.store.get(self.key)
        if text is None:
            return self._outcome("miss")
        try:
            skeleton, program = self._parse(text)
        except CorruptEntry as e:
            self.store.delete(self.key)
            return self._outcome(f"corrupt: {e}")
        program.meta["target"] = target.to_meta()  # this adapter's name, the same class
        shipped = self.key in getattr(self.store, "from_site", ())
        if shipped:  # kept in this origin's cache, as a compile's own entry is
            self.store.put(self.key, text, self._info(program))
        self._outcome("shipped" if shipped else "hit")
        return skeleton, program

    def _parse(self, text: str) -> tuple[Skeleton, Program]:
        head, sep, rest = text.partition("\n")
        digest, sep2, body = rest.partition("\n")
        if head != FORMAT or not (sep and sep2):
            raise CorruptEntry("not a cache entry")
        if hashlib.sha256(body.encode()).hexdigest() != digest:
            raise CorruptEntry("checksum mismatch")
        try:
            d = json.loads(body)
            if d["key"] != self.key:
                raise CorruptEntry("the entry is another key's")
            program = Program.from_json(d["program"])
            skeleton = Skeleton(d["skeleton"])
        except (KeyError, TypeError, ValueError, ProgramError) as e:
            raise CorruptEntry(f"{type(e).__name__}: {e}") from None
        got = {n: list(t.shape) for n, t in skeleton.params.items()}
        # a training step holds every parameter; an inference program those it reads
        want = self.params if self.kind == "step" else {n: self.params.get(n) for n in got}
        if got != want:
            raise CorruptEntry("its parameters are not the model's")
        skeleton.extra = d.get("extra", {})
        if not isinstance(skeleton.extra, dict):
            raise CorruptEntry("its extra data is not a dict")
        if self.kind == "forward" and not isinstance(skeleton.extra.get("single"), bool):
            raise CorruptEntry("an inference entry without its output's form")
        return skeleton, program

    def save(self, graph, bounds: dict, program: Program, **extra) -> None:
        """Store the entry; extra: plain data the caller reads back as skeleton.extra."""
        body = {"key": self.key, "program": program.to_json(), "skeleton": Skeleton.describe(graph, bounds)}
        body = json.dumps({**body, "extra": extra}, separators=(",", ":"))
        text = f"{FORMAT}\n{hashlib.sha256(body.encode()).hexdigest()}\n{body}"
        self.store.put(self.key, text, self._info(program))

    def _info(self, program: Program) -> dict:
        return {"label": self.label, "kernels": len(program.kernels), "kind": self.kind}

    def _outcome(self, what: str) -> None:
        if self.kind == "initial":  # a compile's own outcome is what `last` tells
            return
        last.clear()
        last.update(key=self.key, outcome=what, label=self.label, kind=self.kind)
        log.append(dict(last))


class MemoryStore(dict):
    """Entries in a dict (tests, and a process that compiles the same model again)."""

    def put(self, key: str, text: str, info: dict) -> None:
        self[key] = text

    def delete(self, key: str) -> None:
        self.pop(key, None)


class DirStore:
    """Entries as files of a directory, written atomically (a temporary file renamed)."""

    def __init__(self, path) -> None:
        self.path = Path(path)

    def get(self, key: str) -> str | None:
        try:
            return (self.path / key).read_text()
        except (FileNotFoundError, UnicodeDecodeError):
            return None

    def put(self, key: str, text: str, info: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / f".{key}.{os.getpid()}"
        tmp.write_text(text)
        tmp.replace(self.path / key)

    def delete(self, key: str) -> None:
        (self.path / key).unlink(missing_ok=True)


class BrowserStore:
    """The page's IndexedDB cache (web/progcache.mjs) through the worker's hooks: get
    waits (run_sync), and asks the site's shipped entries for a key the cache lacks; put
    goes on in the background, so the first step need not wait."""

    def __init__(self, js) -> None:
        self.js = js
        self.from_site: set[str] = set()  # keys whose text came from the site's shipped ones

    def get(self, key: str) -> str | None:
        from pyodide.ffi import run_sync

        got = run_sync(self.js.get(key))
        if not isinstance(got, str) and hasattr(self.js, "shipped"):  # JS null arrives as jsnull
            got = run_sync(self.js.shipped(key))
            if isinstance(got, str):
                self.from_site.add(key)
        return got if isinstance(got, str) else None

    def put(self, key: str, text: str, info: dict) -> None:
        from pyodide.ffi import to_js

        self.js.put(key, text, to_js(info, dict_converter=_js_object()))

    def delete(self, key: str) -> None:
        from pyodide.ffi import run_sync

        run_sync(self.js.remove(key))


def _js_object():
    import js

    return js.Object.fromEntries
