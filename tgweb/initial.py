"""Initial values drawn where the parameters live: a program of init_draw nodes
(ops/random.py) that shares a Trainer's parameter buffers and writes them, so that a
reset neither draws nor uploads per element on the host. The values are those
tgweb.nn.init.initial_values gives on the host, bit for bit, on every backend (the
reference backend runs the same graph in NumPy).

A parameter is drawn here when its initialiser has a Draw without a shift (all the
built-in random ones but normal(mean != 0) and asymmetric uniforms): a shift would be
a second rounding that a GPU may fuse with the product into one. The others, constants
and custom initialisers are drawn on the host and written as before.
"""

from __future__ import annotations

from . import progcache
from .backends import lowering_for, make_engine
from .ir import Graph, tracing
from .lower import lower
from .nn.init import constant, counter_draw, f32_round, param_stream
from .ops.random import INIT_STREAM, init_draw, seed_word
from .step_data import check_inputs


def split(model, shapes: dict[str, tuple[int, ...]], states: dict, device: bool = True):
    """What a reset sets: {name: (shape, Draw)} of the parameters (of those named in
    shapes) drawn on the device, {(kind, name): (shape, value)} of the parameters and
    states that start from one value; and [(name, Parameter)], those drawn on the host
    (all random ones where `device` is False). states: name -> its graph leaf, the
    optimizer's states alone (a module's buffers come from its values)."""
    draws, fills, host = {}, {}, []
    for n, p in model.named_parameters():
        if n not in shapes:
            continue
        draw = counter_draw(p.init, p.shape)
        if device and draw is not None and not draw.shift:
            draws[n] = (tuple(p.shape), draw)
        elif type(p.init) is constant:
            fills[("params", n)] = (tuple(p.shape), p.init.value)
        else:
            host.append((n, p))
    for n, t in states.items():
        fills[("states", n)] = (tuple(t.shape), t.attrs["init"])
    return draws, fills, host


def graph_of(draws: dict, fills: dict) -> Graph:
    """The graph whose only work is the next value of each parameter and state it sets."""
    graph = Graph()
    with tracing(graph):
        for n, (shape, draw) in draws.items():
            graph.param(n, shape)
            graph.updates[n] = init_draw(shape, param_stream(n), draw.dist, draw.scale, graph)
        for (kind, n), (shape, value) in fills.items():
            graph.param(n, shape) if kind == "params" else graph.state(n, shape)
            graph.updates[n] = init_draw(shape, 0, "constant", f32_round(value), graph)
    return graph


def plan(trainer, draws: dict, fills: dict) -> tuple[Graph | None, object]:
    """(graph, Program or None) of a trainer's initial values: lowered for its backend's
    device, or taken from the program cache (then no graph is traced: a GPU backend runs
    the Program alone); the graph and None on the reference backend. Needs the trainer's
    model, backend and cache key, not its engine: a trainer plans it while the device
    compiles its step's kernels (Trainer.__init__)."""
    device = lowering_for(trainer.backend)
    if device is None:
        return graph_of(draws, fills), None
    what = {
        "draws": [[n, list(shape), d.dist, d.scale] for n, (shape, d) in draws.items()],
        "fills": [[k, n, list(shape), v] for (k, n), (shape, v) in fills.items()],
    }
    cache = progcache.Lookup.initial(trainer, what, device)
    found = cache.load(device["target"]) if cache is not None else None
    if found is not None:
        return None, found[1]
    graph = graph_of(draws, fills)
    program = lower(graph, name="initial values", **device)
    if cache is not None:
        cache.save(graph, {}, program)
    return graph, program


class DeviceInit:
    """A trainer's program of initial values; draw(seed) writes them into its parameters
    and states. planned: plan()'s (graph, Program), when the trainer made it already."""

    def __init__(self, trainer, draws: dict, fills: dict, planned: tuple | None = None) -> None:
        graph, program = planned or plan(trainer, draws, fills)
        self._engine = make_engine(graph, program, trainer.backend, "float32", share=trainer.engine)
        self._none = check_inputs({}, {}, "inputs")

    def draw(self, seed: int) -> None:
        self._engine.run(self._none, {"seed": seed_word(seed, 0, INIT_STREAM)}, [])

    def close(self) -> None:
        self._engine.close()
