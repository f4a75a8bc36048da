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


# Initial values (ops/random.py's init_draw): integers from the stream's bits, exact in f32,
# so that one multiply (correctly rounded everywhere) gives the value, bit for bit as the host
_BITS = """fn tg_bits(k: u32, c: u32) -> u32 {
  return tg_hash(tg_hash(c ^ k) + k);
}"""

_SPREAD = """fn tg_spread24(k: u32, i: u32) -> i32 {
  return 2i * i32(tg_bits(k, i) >> 8u) - 16777215i;
}"""

_SUM12 = """fn tg_sum12(k: u32, i: u32) -> i32 {
  var s = 0i;
  for (var j = 0u; j < 6u; j++) {
    let h = tg_bits(k, 6u * i + j);
    s += i32(h & 0xffffu) + i32(h >> 16u);
  }
  return 2i * s - 786420i;
}"""


def init_ints_wgsl(kc, key: str, dist: str, ivar: str) -> str:
    """The WGSL expression of init_draw's integer at flat index ivar (see ops/random.py)."""
    if dist == "constant":
        return "1i"
    kc.helper("tg_bits", _BITS)
    name = "tg_spread24" if dist == "uniform" else "tg_sum12"
    kc.helper(name, _SPREAD if dist == "uniform" else _SUM12)
    return f"{name}({key}, {ivar})"


def key_wgsl(kc, seed: str, stream: int) -> str:
    """The WGSL expression of key(seed, stream) for a seed value (an i32 expression);
    tg_uniform(key, counter) is then uniform(seed, stream, counter). The stream's
    constant is a word of the kernel's uniform, not a literal: the dropouts of a model's
    repeated layers then have one WGSL text."""
    kc.helper("tg_hash", _HASH)
    kc.helper("tg_uniform", _UNIFORM)
    return f"tg_hash(bitcast<u32>({seed}) ^ {kc.word(stream_hash(stream))})"
