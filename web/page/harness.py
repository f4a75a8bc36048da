"""The trainer page's Python side (web/index.html, web/app.mjs).

Each sample's source runs in a namespace of its own; it must define `trainer` (from
tg.compile) and `train(steps)`, and may define `show()` (the sample's view, sent as a
"view" event) and functions its view module calls through page_call. The page calls
the functions below by name through tgweb.mjs's run().
"""

import array
import base64
import time

from tgweb import progcache, worker
from tgweb.io import checkpoint, safetensors

_spaces = {}
_STATE = "optimizer."  # prefix of optimizer-state tensors in a saved file


def _ns(name):
    try:
        return _spaces[name]
    except KeyError:
        raise RuntimeError(f"{name}: press Start first (the source has not run yet)") from None


def _count(shapes):
    total = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def page_info(name):
    ns = _ns(name)
    tr = ns["trainer"]
    prog = tr.program
    return {"params": _count(t.shape for t in tr.graph.params.values()), "steps": tr.steps,
            "calls": tr.calls, "backend": tr.backend, "kernels": len(prog.kernels) if prog is not None else None,
            "compile_s": ns.get("__compile_s__"), "cache": ns.get("__cache__"),
            "cache_attached": ns.get("__cache_attached__", [])}


def page_exec(name, source, filename, show=True):
    """Run a sample's source in a fresh namespace (compiling its trainer), then show().
    show=False (Start, which trains at once): page_train shows after the first step, so
    that the view's evaluation does not delay that step."""
    _spaces.pop(name, None)
    ns = {"__name__": "__main__", "__file__": filename}
    t0 = time.perf_counter()
    with progcache.keyed(source, label=name):  # a repeat visit reuses the compiled Programs
        exec(compile(source, filename, "exec"), ns)
    compile_s = time.perf_counter() - t0
    if not hasattr(ns.get("trainer"), "step"):
        raise NameError(f"{filename} must define `trainer` (what tg.compile returns)")
    if not callable(ns.get("train")):
        raise NameError(f"{filename} must define train(steps), the loop Start calls")
    ns["__compile_s__"] = compile_s
    # what the cache did for the trainer and for each program it attached, in order
    mine = [e for e in progcache.log if e["label"] == name]
    ns["__cache__"] = next((e["outcome"] for e in mine if e["kind"] == "step"), None)
    ns["__cache_attached__"] = [e["outcome"] for e in mine if e["kind"] == "forward"]
    _spaces[name] = ns
    if show:
        _show(ns)
    else:
        ns["__unshown__"] = True
    return page_info(name)


def _show(ns):
    if callable(ns.get("show")):
        ns["show"]()


def page_train(name, steps, autosave_s=None):
    """train(steps); a stop request ends it quietly. Then show(). autosave_s: the run's
    checkpoint goes to the page that often (worker.autosave), and once more at the end."""
    ns = _ns(name)
    t0, s0 = time.perf_counter(), ns["trainer"].steps
    saver = worker.autosave(ns["trainer"], every_s=autosave_s, name=name) if autosave_s else None
    stopped, n = False, int(steps)
    try:
        if ns.pop("__unshown__", False) and n > 1:  # compiled by Start: the view after step 1
            ns["train"](1)
            worker.flush()  # the first loss reaches the page now
            _show(ns)
            n -= 1
        ns["train"](n)
    except worker.Stopped:
        stopped = True
    finally:
        if saver is not None:
            saver.close()
    worker.flush()  # the metrics of the last steps (train() may leave them waiting)
    secs = time.perf_counter() - t0
    if saver is not None:
        saver.save()
    _show(ns)
    out = page_info(name)
    out.update(stopped=stopped, ran=out["steps"] - s0, seconds=secs)
    if saver is not None:
        out.update(saves=saver.saves, save_seconds=saver.seconds)
    return out


def page_resume(name, data):
    """Restore a saved run's checkpoint (the page's autosave) into the compiled sample."""
    blob = data.to_bytes() if hasattr(data, "to_bytes") else bytes(data)
    meta = checkpoint.load(_ns(name)["trainer"], blob)
    _show(_spaces[name])
    out = page_info(name)
    out.update(meta=meta)
    return out


def page_call(name, fn, kwargs):
    """fn(**kwargs) from the sample's namespace, for its view (page/views/<name>.mjs)."""
    ns = _ns(name)
    f = ns.get(fn)
    if not callable(f):
        raise NameError(f"{name}.py defines no function {fn!r} for its view to call")
    return f(**kwargs)


def page_reset(name):
    ns = _ns(name)
    ns["trainer"].reset()
    _show(ns)
    return page_info(name)


def page_save(name):
    """Parameters and optimizer state as safetensors bytes, base64-encoded for the page."""
    # the whole checkpoint: parameters, optimizer state, steps, the random stream, the schedule
    return base64.b64encode(checkpoint.save(_ns(name)["trainer"], {"sample": name})).decode("ascii")


def page_load(name, data):
    """Load a file from page_save (or any safetensors file with the same parameter names
    and shapes). Checks everything first: on error nothing changes."""
    tr = _ns(name)["trainer"]
    blob = data.to_bytes() if hasattr(data, "to_bytes") else bytes(data)
    tensors, meta = safetensors.load(blob)
    params = {k: v for k, v in tensors.items() if not k.startswith(_STATE)}
    states = {k[len(_STATE):]: v for k, v in tensors.items() if k.startswith(_STATE)}
    want = {k: tuple(t.shape) for k, t in tr.graph.params.items()}
    missing = sorted(set(want) - set(params))
    extra = sorted(set(params) - set(want))
    wrong = [f"{k} {tuple(params[k].shape)} (model: {want[k]})" for k in want
             if k in params and tuple(params[k].shape) != want[k]]
    if missing or extra or wrong:
        raise ValueError("these parameters do not fit this model: " + "; ".join(
            ([f"missing {missing}"] if missing else []) + ([f"unexpected {extra}"] if extra else [])
            + ([f"wrong shape {wrong}"] if wrong else [])))
    swant = {k: tuple(t.shape) for k, t in tr.graph.states.items()}
    use_states = bool(states) and {k: tuple(v.shape) for k, v in states.items()} == swant
    if use_states:  # a checkpoint: restored as a whole, checked before anything changes
        checkpoint.load(tr, blob)
    else:  # parameters only: the optimizer starts afresh
        tr.load_params(params)
        tr.load_states({k: array.array("f", [t.attrs["init"]]) * _count([t.shape])
                        for k, t in tr.graph.states.items()},
                       steps=0)
    _show(_spaces[name])
    out = page_info(name)
    out.update(optimizer_state=use_states, tensors=len(tensors), meta=meta)
    return out
