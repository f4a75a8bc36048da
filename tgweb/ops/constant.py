"""Data constants: a tensor built from data inside a traced function (tgweb.torch's
torch.tensor([[0, 1, 2]]) in a forward, a class-weight table) becomes a leaf of kind
"constant" (Graph.constant) whose values the graph holds. The Program carries them
(Program.constants and Program.data) and every runtime uploads them once, when it
instantiates the Program; nothing trains them. MAX_BYTES bounds one constant."""

from __future__ import annotations

import array
import sys

from ..ir import NO_GRAD, TraceError, current_graph, prod, register, user_site

MAX_BYTES = 1 << 20  # 1 MiB: bigger data belongs in an input or a parameter
WORDS = {"f32": "<f4", "i32": "<i4", "bool": "<u4"}  # a constant's data, as NumPy reads it
_TYPECODE = {"f32": "f", "i32": "i", "bool": "I"}


def constant(values: list, shape: tuple[int, ...], dtype: str):
    """The constant of flat values (of dtype "f32", "i32" or "bool") in the graph being
    traced; TraceError for data over MAX_BYTES or ints that do not fit i32."""
    g = current_graph()
    if g is None:
        raise TraceError("constant: only while tracing", user_site())
    nbytes = 4 * prod(shape)
    if nbytes > MAX_BYTES:
        raise TraceError(
            f"a tensor of {nbytes:,} bytes (shape {tuple(shape)}) made from data is read inside the traced "
            f"function; a graph holds data constants of at most {MAX_BYTES:,} bytes: pass it as an input "
            "of the step, or make it an nn.Parameter (requires_grad=False to keep it fixed)",
            user_site(),
        )
    if dtype == "i32" and any(not -(2**31) <= v < 2**31 for v in values):
        raise TraceError(f"a constant of shape {tuple(shape)} holds ints that do not fit int32", user_site())
    words = array.array(_TYPECODE[dtype], [int(v) for v in values] if dtype != "f32" else values)
    if sys.byteorder != "little":
        words.byteswap()
    return g.constant(words.tobytes(), tuple(shape), dtype)


def _ref(ctx, args, t):
    a = ctx.np.frombuffer(t.attrs["data"], WORDS[t.dtype]).reshape(t.shape)
    return a.astype(bool) if t.dtype == "bool" else a


def _torch(tc, args, t):
    import numpy as np

    a = np.frombuffer(t.attrs["data"], WORDS[t.dtype]).reshape(t.shape)
    out = tc.torch.tensor(a.astype(bool) if t.dtype == "bool" else a.copy(), device=tc.device)
    return out.to(tc.float) if t.dtype == "f32" else out


register(
    "constant",
    family="leaf",
    infer=lambda ins, a: ((), "f32"),  # never called: Graph.constant makes the node
    grad=NO_GRAD,
    ref=_ref,
    role="leaf",
    torch=_torch,
)
