"""The graph: dtypes, tensors, the op-kind registry and tracing.

Every op call during tracing appends one Tensor (a node) to the current Graph.
Shapes and dtypes are checked at that moment, and errors name the user's line.
Nothing here imports NumPy.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

DTYPES = ("f32", "i32", "bool")
# NumPy's and PyTorch's names for them, accepted wherever a dtype is named
_DTYPE_NAMES = {
    "float32": "f32",
    "int32": "i32",
    "bool_": "bool",
    "torch.float32": "f32",
    "torch.int32": "i32",
    "torch.bool": "bool",
    # 64-bit integers (torch.long) become i32; step inputs are checked to fit
    "int64": "i32",
    "torch.int64": "i32",
}


def dtype_name(dtype: Any) -> Any:
    """tgweb's name of a dtype given as "f32", "float32", numpy.float32, torch.int32, ...;
    anything else is returned as it is (and refused by the caller, naming it)."""
    if isinstance(dtype, str):
        return _DTYPE_NAMES.get(dtype, dtype)
    name = getattr(dtype, "__name__", None) or str(dtype)  # numpy.float32, np.dtype, torch.int32
    name = _DTYPE_NAMES.get(name, _DTYPE_NAMES.get(str(getattr(dtype, "name", "")), name))
    return name if name in DTYPES else dtype


# bool is stored as one u32 per element; f16 (binary16) is a storage type only, two values
# a word, made by the to_f16 kind of precision="mixed" programs (arithmetic stays f32)
ITEMSIZE = {"f32": 4, "i32": 4, "bool": 4, "f16": 2}
PRECISIONS = ("float32", "mixed", "float64")  # float64: the reference backend only

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


class TraceError(ValueError):
    """A shape, dtype or usage error found while tracing; names the user's call site."""

    def __init__(self, message: str, site: str = "") -> None:
        self.site = site
        super().__init__(f"{message}\n  at {site}" if site else message)


class OpError(ValueError):
    """Raised by shape rules; turned into a TraceError carrying the call site."""


def user_site() -> str:
    """The first stack frame outside the tgweb package, as 'file:line'."""
    f = sys._getframe(1)
    while f is not None:
        if not _ours(f.f_code.co_filename):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


_OURS: dict[str, bool] = {}  # code file name -> whether it is in the package (every node asks)


def _ours(name: str) -> bool:
    hit = _OURS.get(name)
    if hit is None:
        hit = os.path.abspath(name).startswith(_PKG_DIR + os.sep)
        if os.path.isabs(name):  # a relative name's answer follows the current directory
            _OURS[name] = hit
    return hit


def prod(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def strides(shape) -> list[int]:
    """Row-major element strides of a shape."""
    out, s = [], 1
    for d in reversed(tuple(shape)):
        out.append(s)
        s *= d
    return out[::-1]


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape the shapes broadcast to (NumPy's rule), or OpError."""
    n = max(len(s) for s in shapes)
    out = []
    for i in range(n):
        dims = {s[len(s) - n + i] for s in shapes if len(s) - n + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise OpError("shapes do not broadcast: " + ", ".join(str(tuple(s)) for s in shapes))
        out.append(dims.pop() if dims else 1)
    return tuple(out)


# --------------------------------------------------------------------------
# The op-kind registry


NO_GRAD = "no-grad"  # marks an op kind whose inputs receive no gradient

# How lowering treats a kind (its fusion role):
#   leaf         fed by the host (inputs, params, optimizer state, per-step scalars)
#   view         its output is its first input's memory (reshape, stop_gradient)
#   const        a literal written into every kernel that reads it (full)
#   elementwise  fuses; reads its inputs at its own index, broadcasting aside
#   index        fuses; reads inputs stored elsewhere at other indices (shape moves,
#                gathers, windows)
#   reduction    a kernel of its own that may compute its input as a fused prologue
#                and run a fused epilogue on its result
#   kernel       a kernel of its own (opaque), or one that hosts a fused epilogue
#                when registered with epilogue=True (matmul, the global norm)
ROLES = ("leaf", "view", "const", "elementwise", "index", "reduction", "kernel")


@dataclass
class OpDef:
    """One op kind and all of its parts.

    infer(inputs, attrs) -> (shape, dtype); raises OpError on bad input.
    grad(t, g) -> list of cotangents (Tensor or None), one per input; or NO_GRAD.
    ref(ctx, args, t) -> array: the NumPy reference; args are the input arrays, t the node.
    role: one of ROLES (see above).
    emit(ctx, node): the WGSL emitter, one signature for every kind. For the fused
      roles (const, elementwise, index) ctx is the group being emitted
      (tgweb.codegen.common.GroupEmitter) and emit returns the WGSL expression of
      node's value at the group's current index; for reduction and kernel, ctx is
      the kernel being built (tgweb.codegen.common.KernelCtx) and emit returns
      (body lines, dispatch, workgroup size). None for leaf and view kinds, and for
      kinds that have no kernel yet (lowering says so).
    epilogue: a kernel kind whose emitter stores its result through ctx.result, so a
      fused elementwise group may run on the value before it is stored.
    strided: reads its operands and writes its result through the strided views that
      lowering folds in (attrs "views" and "out_view"), instead of copied permutes.
    rewrite(node, target, new_id) -> [nodes] or None: how the kind is computed for a
      target (tgweb.codegen.target), as nodes in topological order, the last one
      taking node's id (matmul splits a long k on a GPU); None keeps the node.
    index_bounds(node) -> [(input position, exclusive bound, *values also allowed)]: the
      integer inputs that index something and the size they index (plus values the kind
      handles itself, a loss's ignore_index); the trainer range-checks step inputs that
      reach such a position (tgweb.step_data.index_bounds). None: no index inputs.
    torch(tc, args, node) -> torch tensor: the kind's PyTorch form (tgweb.torchbridge);
      None: tg.to_torch refuses graphs holding the kind.
    recompute: a kernel kind whose copy (one stored row read again) costs less than
      keeping its output stored until a late reader (tgweb.passes.remat).
    flops(node) -> int: kernel kinds only: the arithmetic of computing node once; a
      kind that has it may be recomputed in the backward pass when the plan is over a
      memory budget (tgweb.passes.remat.fit). None: never recomputed for memory.
    perm(node) -> axes: an index kind whose output is its first input with its axes in
      this order, which a strided kind reads or writes through strides instead
      (tgweb.passes.views). None: no such view.
    pairs(node) -> bool: an epilogue kind: whether its kernel for node can run a fused
      epilogue that stores f16 values (precision="mixed"), each invocation storing
      two neighbours into one word (ctx.result_pair). None: never.
    window(node) -> (axis, start, stop): an index kind whose output is its first input's
      elements start .. stop - 1 along axis, which a strided kind reads through strides
      and an offset instead (tgweb.passes.views). None: no such view.
    """

    kind: str
    family: str
    infer: Callable[..., tuple[tuple[int, ...], str]]
    grad: Any
    ref: Callable[..., Any]
    role: str
    emit: Callable[..., Any] | None = None
    epilogue: bool = False
    strided: bool = False
    rewrite: Callable[..., Any] | None = None
    index_bounds: Callable[..., Any] | None = None
    torch: Callable[..., Any] | None = None
    recompute: bool = False
    perm: Callable[..., Any] | None = None
    flops: Callable[..., int] | None = None
    pairs: Callable[..., bool] | None = None
    window: Callable[..., Any] | None = None

    @property
    def fuses(self) -> bool:
        """Whether a fused elementwise kernel can compute this kind."""
        return self.role in ("const", "elementwise", "index")

    @property
    def same_index(self) -> bool:
        """Whether this kind reads its inputs at its own index (broadcasting aside)."""
        return self.role in ("const", "elementwise")

    @property
    def own_kernel(self) -> bool:
        return self.role in ("reduction", "kernel")


REGISTRY: dict[str, OpDef] = {}


def register(
    kind: str,
    *,
    family: str,
    infer,
    grad,
    ref,
    role: str,
    emit=None,
    epilogue: bool = False,
    strided: bool = False,
    rewrite=None,
    index_bounds=None,
    torch=None,
    recompute: bool = False,
    perm=None,
    flops=None,
    pairs=None,
    window=None,
) -> OpDef:
    if kind in REGISTRY:
        raise RuntimeError(f"op kind {kind!r} registered twice")
    if role not in ROLES:
        raise RuntimeError(f"op kind {kind!r}: role {role!r} is not one of {ROLES}")
    if recompute and role != "kernel":
        raise RuntimeError(
            f"op kind {kind!r}: only kernel kinds are marked recompute (fused ones always are)"
        )
    if flops is not None and role != "kernel":
        raise RuntimeError(f"op kind {kind!r}: only kernel kinds declare flops (fused ones cost their size)")
    if (perm is not None or window is not None) and role != "index":
        raise RuntimeError(f"op kind {kind!r}: a perm or window view must be an index kind, not {role!r}")
    parts = (infer, grad, ref, role, emit, epilogue, strided, rewrite, index_bounds, torch, recompute, perm)
    if pairs is not None and not epilogue:
        raise RuntimeError(f"op kind {kind!r}: only epilogue kinds store an epilogue's f16 pairs")
    d = OpDef(kind, family, *parts, flops, pairs, window)
    REGISTRY[kind] = d
    return d


def opdef(t: "Tensor") -> OpDef:
    return REGISTRY[t.kind]


def root(t: "Tensor") -> "Tensor":
    """The tensor whose memory t is: t with views (reshape, stop_gradient) followed."""
    while REGISTRY[t.kind].role == "view":
        t = t.inputs[0]
    return t


# --------------------------------------------------------------------------
# Tensors and graphs


class Size(int):
    """A tensor's element count that, called, is PyTorch's size(): the shape, or the
    length of one axis."""

    def __new__(cls, n: int, shape: tuple[int, ...]) -> "Size":
        self = super().__new__(cls, n)
        self.shape = shape
        return self

    def __call__(self, dim: int | None = None):
        if dim is None:
            return self.shape
        if not isinstance(dim, int) or not -len(self.shape) <= dim < len(self.shape):
            raise TraceError(f"size({dim!r}) is out of range for shape {self.shape}", user_site())
        return self.shape[dim]


class TensorOps:
    """What Tensor, nn.Parameter and tgweb.torch's host tensors share: shape queries and
    the errors of what a traced value cannot do. Their operators and op methods (+, @,
    .sum(), .reshape(), ...) forward to tgweb.ops, which installs them when it loads
    (ops/methods.py): ir never imports ops."""

    def _t(self) -> "Tensor":
        raise NotImplementedError  # pragma: no cover - overridden by both subclasses

    def __setitem__(self, idx, value):
        raise TraceError(
            "item assignment on a parameter is an in-place update, which a compiled graph "
            "cannot express: compute a new tensor instead (or set values before compiling)",
            user_site(),
        )

    __hash__ = object.__hash__

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> "Size":
        """The element count (NumPy's x.size); called, PyTorch's x.size() or x.size(dim)."""
        return Size(prod(self.shape), self.shape)

    def numel(self) -> int:
        return prod(self.shape)

    def __len__(self) -> int:
        """The first axis's size, as PyTorch's and NumPy's len(); a 0-d tensor has none."""
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def dim(self) -> int:
        return len(self.shape)

    def item(self):
        raise TraceError(
            ".item() inside a traced function: a tensor's value exists only on the GPU while "
            "the step runs; return it from the loss function (or tg.capture it) and read it "
            "from the step's result",
            user_site(),
        )

    def backward(self, *args, **kwargs):
        raise TraceError(
            ".backward() outside tg.compile: gradients are part of the compiled step; "
            "tg.compile(model, loss_fn, inputs, optimizer) derives them, and "
            "tg.value_and_grad returns them",
            user_site(),
        )

    @property
    def device(self) -> str:
        return "webgpu"

    def contiguous(self):
        return self  # every traced tensor is laid out row-major


_OPS: Any = None  # the tgweb.ops namespace; tgweb.ops binds itself (ir never imports it)


def bind_ops(namespace: Any) -> None:
    """Called by tgweb.ops: where Tensor operators (+, @, .sum(), ...) find their ops."""
    global _OPS
    _OPS = namespace


def bound_ops() -> Any:
    """The tgweb.ops namespace (for code that runs after every op family is loaded)."""
    return _OPS


_ops = bound_ops


class Tensor(TensorOps):
    """A node of the graph: the one output of an op. Shapes are static tuples."""

    __slots__ = ("id", "kind", "inputs", "attrs", "shape", "dtype", "site", "graph")

    def __init__(
        self,
        graph: "Graph",
        kind: str,
        inputs: tuple["Tensor", ...],
        attrs: dict,
        shape: tuple[int, ...],
        dtype: str,
        site: str,
    ) -> None:
        self.graph = graph
        self.id = len(graph.tensors)
        self.kind = kind
        self.inputs = inputs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.site = site

    def _t(self) -> "Tensor":
        return self

    def __repr__(self) -> str:
        return f"Tensor(%{self.id} {self.kind} {self.dtype}{list(self.shape)})"

    def __bool__(self):
        raise TraceError(
            "a traced tensor has no truth value (a Python branch on a tensor's value, "
            "as in `if x > 0:`, cannot be compiled); use tg.where for conditions",
            user_site(),
        )

    def __eq__(self, o):  # type: ignore[override]
        return _ops().equal(self, o)

    def __ne__(self, o):  # type: ignore[override]
        return _ops().equal(_ops().equal(self, o), False)

    def __setitem__(self, idx, value):
        """x[idx] = value as a functional update: this tensor object now denotes the new
        value (tgweb.ops.index_put); readers built before still read the old one."""
        _swap(self, _ops().index_put(self, idx, value))

    __hash__ = TensorOps.__hash__


def _swap(a: Tensor, b: Tensor) -> None:
    """Exchange two nodes' identities in their graph: every reference to a (the node
    lists, inputs, entry and exit points) now holds b and the other way round, and the
    objects trade contents, so object a is the later value and object b the earlier."""
    g = a.graph
    pick = {id(a): b, id(b): a}
    for t in g.tensors:
        if any(id(i) in pick for i in t.inputs):
            t.inputs = tuple(pick.get(id(i), i) for i in t.inputs)
    named = (g.inputs, g.params, g.captures, g.outputs, g.param_tensors, g.states, g.scalars)
    for d in named + (g.constants, g.buffer_tensors):
        for k, v in d.items():
            if id(v) in pick:
                d[k] = pick[id(v)]
    for s in Tensor.__slots__:
        va, vb = getattr(a, s), getattr(b, s)
        setattr(a, s, vb)
        setattr(b, s, va)
    g.tensors[a.id], g.tensors[b.id] = a, b


def replace(
    t: Tensor,
    *,
    id: int | None = None,
    kind: str | None = None,
    inputs=None,
    attrs=None,
    site: str | None = None,
    shape: tuple[int, ...] | None = None,
) -> Tensor:
    """A node standing in for t during lowering, outside the graph's tensor list. With
    the same id (the default) it replaces t for everything that reads t (a permute
    folded into a matmul, a reader rewired to a recomputed value); with a new id it is
    a copy of t (a recomputation)."""
    n = Tensor.__new__(Tensor)
    n.graph, n.id, n.kind = t.graph, t.id if id is None else id, kind or t.kind
    n.inputs = tuple(t.inputs if inputs is None else inputs)
    n.attrs = t.attrs if attrs is None else attrs
    n.shape, n.dtype, n.site = t.shape if shape is None else tuple(shape), t.dtype, site or t.site
    return n


@dataclass
class Graph:
    """Tensors in creation (topological) order plus the named entry and exit points."""

    tensors: list[Tensor] = field(default_factory=list)
    inputs: dict[str, Tensor] = field(default_factory=dict)
    params: dict[str, Tensor] = field(default_factory=dict)
    captures: dict[str, Tensor] = field(default_factory=dict)
    outputs: dict[str, Tensor] = field(default_factory=dict)
    param_tensors: dict[int, Tensor] = field(default_factory=dict)  # id(Parameter) -> node
    states: dict[str, Tensor] = field(default_factory=dict)  # persistent optimizer state
    constants: dict[str, Tensor] = field(default_factory=dict)  # data the Program carries (read-only)
    buffer_tensors: dict[int, Tensor] = field(default_factory=dict)  # id(module buffer) -> its state
    scalars: dict[str, Tensor] = field(default_factory=dict)  # per-step host scalars
    updates: dict[str, Tensor] = field(default_factory=dict)  # param/state name -> next value
    grads: dict[str, Tensor] = field(default_factory=dict)  # param name -> its gradient
    rng_ops: int = 0  # counter that gives each stochastic op its own stream
    precision: str = "float32"  # "mixed": matmul operands stored as f16 (tgweb.ops.half)
    halves: dict[int, Tensor] = field(default_factory=dict)  # tensor id -> its f16 copy
    saved: dict[int, Tensor] = field(default_factory=dict)  # tensor id -> its f16 copy read as f32
    kept: dict[int, tuple] = field(default_factory=dict)  # node id -> parts of it its gradient reads
    on_add: Any = None  # called with each new node (a mixed forward: its f16 copies, ops.half)
    _site_override: str | None = None

    def add(
        self,
        kind: str,
        inputs: tuple[Tensor, ...],
        attrs: dict,
        shape: tuple[int, ...],
        dtype: str,
        site: str | None = None,
    ) -> Tensor:
        t = Tensor(self, kind, inputs, attrs, shape, dtype, site or self._site_override or user_site())
        self.tensors.append(t)
        if self.on_add is not None:
            self.on_add(t)
        return t

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "f32") -> Tensor:
        check_name(name, "input")
        if name in self.inputs:
            raise TraceError(f"input {name!r} declared twice")
        check_shape(shape, f"input {name!r}")
        dtype = dtype_name(dtype)
        if dtype not in DTYPES:
            raise TraceError(f"input {name!r}: dtype must be one of {DTYPES}, got {dtype!r}")
        t = self.add("input", (), {"name": name}, tuple(shape), dtype)
        self.inputs[name] = t
        return t

    def param(self, name: str, shape: tuple[int, ...]) -> Tensor:
        t = self.add("param", (), {"name": name}, tuple(shape), "f32")
        self.params[name] = t
        return t

    def state(self, name: str, shape: tuple[int, ...], init: float = 0.0, buffer: bool = False) -> Tensor:
        """Persistent f32 state (optimizer moments), initialised to a constant; buffer: a
        module's buffer that its forward updates (BatchNorm's running statistics), whose
        values the Trainer takes from the model and keeps under the buffer's own name."""
        if name in self.states:
            raise TraceError(f"state {name!r} declared twice")
        attrs = {"name": name, "init": float(init)} | ({"buffer": True} if buffer else {})
        t = self.add("state", (), attrs, tuple(shape), "f32")
        self.states[name] = t
        return t

    def constant(self, data: bytes, shape: tuple[int, ...], dtype: str) -> Tensor:
        """A read-only tensor of data (its values as little-endian 32-bit words, bool as
        0/1 u32), carried by the Program and uploaded once; equal data is one constant."""
        for t in self.constants.values():
            if t.attrs["data"] == data and t.shape == tuple(shape) and t.dtype == dtype:
                return t
        name = f"constant{len(self.constants)}"
        t = self.add("constant", (), {"name": name, "data": bytes(data)}, tuple(shape), dtype)
        self.constants[name] = t
        return t

    def scalar(self, name: str, dtype: str = "f32") -> Tensor:
        """A per-step scalar the host writes before each step (lr, bias corrections, seed).
        dtype f32, or i32 for a u32 word (the PRNG seed)."""
        if name not in self.scalars:
            self.scalars[name] = self.add("scalar", (), {"name": name}, (), dtype)
        return self.scalars[name]

    @contextlib.contextmanager
    def site_override(self, site: str) -> Iterator[None]:
        """Nodes built inside (grad and optimizer ops) point at the forward op's site."""
        old, self._site_override = self._site_override, site
        try:
            yield
        finally:
            self._site_override = old


def check_name(name: Any, what: str) -> None:
    if not isinstance(name, str) or not name:
        raise TraceError(f"{what} name must be a non-empty string, got {name!r}")
    if not is_text(name):
        raise TraceError(f"{what} name {name!r} is not valid UTF-8 text (it holds a lone surrogate)")


def is_text(s: str) -> bool:
    """Whether s has a UTF-8 form: names go into JSON, WebGPU labels and files, none of
    which can hold a lone surrogate (a code point U+D800 to U+DFFF on its own)."""
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_shape(shape: Any, what: str) -> None:
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape
    ):
        raise TraceError(f"{what}: shape must be a tuple of positive ints, got {shape!r}")


# --------------------------------------------------------------------------
# Tracing context

_STACK: list[Graph] = []


@contextlib.contextmanager
def tracing(graph: Graph) -> Iterator[Graph]:
    _STACK.append(graph)
    try:
        yield graph
    finally:
        _STACK.pop()


def gc_paused(fn: Callable) -> Callable:
    """fn with Python's cyclic garbage collector off while it runs (a compile, a lowering):
    they make many objects and few cycles, and the collector's passes over them cost 4-7%
    of a compile. Its state is restored after, errors included. The wrapper's frame is in
    this package, so user_site() still finds the caller's line."""

    @functools.wraps(fn)
    def paused(*args, **kwargs):
        was = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            if was:
                gc.enable()

    return paused


def current_graph() -> Graph | None:
    return _STACK[-1] if _STACK else None


def make(kind: str, inputs: tuple[Tensor, ...] | list[Tensor], **attrs) -> Tensor:
    """Build one node: check the inputs with the kind's shape rule and append it."""
    inputs = tuple(inputs)
    graph = inputs[0].graph if inputs else current_graph()
    if graph is None:
        raise TraceError(
            f"{kind}: tgweb ops run only while tracing (inside tg.compile, tg.value_and_grad or tg.trace)",
            user_site(),
        )
    for t in inputs:
        if t.graph is not graph:
            raise TraceError(f"{kind}: tensors from different traces were mixed", user_site())
    d = REGISTRY[kind]
    try:
        shape, dtype = d.infer(inputs, attrs)
    except OpError as e:
        raise TraceError(f"{kind}: {e}", graph._site_override or user_site()) from None
    return graph.add(kind, inputs, attrs, tuple(shape), dtype)


def _leaf(kind: str) -> None:
    def ref(ctx, args, t):  # pragma: no cover - the evaluator feeds leaves itself
        raise AssertionError(f"{kind} nodes are fed, not computed")

    register(kind, family="leaf", infer=lambda ins, a: ((), "f32"), grad=NO_GRAD, ref=ref, role="leaf")


for _kind in ("input", "param", "state", "scalar"):
    _leaf(_kind)
