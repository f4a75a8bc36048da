"""The counter-based hash of tgweb.ops.random's streams, as kernels draw it: the
per-stream constant (pure Python, folded into a kernel's uniform words) and the WGSL
functions tg_hash and tg_uniform. Here rather than in ops/random.py because kernel
families draw from the streams too (attention's dropout, codegen/attention_rows.py).
ops/random.py has the whole definition, and the same hash in NumPy and PyTorch."""

from __future__ import annotations

M32 = 0xFFFFFFFF
GOLDEN = 0x9E3779B9
STREAM_OFFSET = 0x632BE5AB


def lowbias32(x: int) -> int:
    x &= M32
    x ^= x >> 16
    x = (x * 0x7FEB352D) & M32
    x ^= x >> 15
    x = (x * 0x846CA68B) & M32
    x ^= x >> 16
    return x


def stream_hash(stream: int) -> int:
    """The per-op constant a stream's key mixes into the seed."""
    return lowbias32(((stream * GOLDEN) + STREAM_OFFSET) & M32)


# ---------------------------------------------------------------- WGSL: the same hash, bit for bit

_HASH = """fn tg_hash(x0: u32) -> u32 {
  var x = x0;
  x = x ^ (x >> 16u);
  x = x * 0x7feb352du;
  x = x ^ (x >> 15u);
  x = x * 0x846ca68bu;
  x = x ^ (x >> 16u);
  return x;
}"""

_UNIFORM = """fn tg_uniform(k: u32, c: u32) -> f32 {
  return f32(tg_hash(tg_hash(c ^ k) + k) >> 8u) * 5.9604644775390625e-8;
}"""


def key_wgsl(kc, seed: str, stream: int) -> str:
    """The WGSL expression of key(seed, stream) for a seed value (an i32 expression);
    tg_uniform(key, counter) is then uniform(seed, stream, counter). The stream's
    constant is a word of the kernel's uniform, not a literal: the dropouts of a model's
    repeated layers then have one WGSL text."""
    kc.helper("tg_hash", _HASH)
    kc.helper("tg_uniform", _UNIFORM)
    return f"tg_hash(bitcast<u32>({seed}) ^ {kc.word(stream_hash(stream))})"
