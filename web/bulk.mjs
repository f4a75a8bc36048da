// bulk.mjs: work over parameter-sized arrays that Python in Pyodide (no NumPy) would do
// one value at a time. The worker hands it to Python as tgweb_js.bulk:
//   - tgweb/nn/init.py draws initial values here, the same values CPython's random.Random
//     gives: its MT19937 stream, continued from the generator's state, then random()
//     and gauss() as Lib/random.py computes them, rounded to f32;
//   - tgweb/nn/init.py draws a module's initial values from the counter-based stream here
//     (counter), as the device and NumPy do (tgweb/ops/random.py's init_draw);
//   - tgweb/arrays.py finds the first non-finite value of loaded parameters here.

const N = 624; // MT19937's state: 624 words and a position in them
const M = 397;
const TWOPI = 2 * Math.PI; // random.py's TWOPI, the same double

/**
 * CPython's random.Random stream from its state: `key` (624 words, moved on in place) at
 * position `pos`. random() is (a * 2**26 + b) / 2**53 of two tempered words (a = w1 >> 5,
 * b = w2 >> 6), as CPython's random_random computes it.
 */
class Twister {
  constructor(key, pos) {
    this.mt = key;
    this.pos = pos;
  }

  refill() {
    const mt = this.mt;
    for (let k = 0; k < N; k++) {
      const y = (mt[k] & 0x80000000) | (mt[k + 1 < N ? k + 1 : 0] & 0x7fffffff);
      mt[k] = mt[k + M < N ? k + M : k + M - N] ^ (y >>> 1) ^ (y & 1 ? 0x9908b0df : 0);
    }
    this.pos = 0;
  }

  word() {
    if (this.pos >= N) this.refill();
    let y = this.mt[this.pos++];
    y ^= y >>> 11;
    y ^= (y << 7) & 0x9d2c5680;
    y ^= (y << 15) & 0xefc60000;
    return (y ^ (y >>> 18)) >>> 0;
  }

  random() {
    const a = this.word() >>> 5;
    return (a * 67108864 + (this.word() >>> 6)) / 9007199254740992;
  }
}

function checkKey(key, pos) {
  if (!(key instanceof Uint32Array) || key.length !== N) throw new TypeError(`the generator's key must be a Uint32Array of ${N} words`);
  if (!Number.isInteger(pos) || pos < 0 || pos > N) throw new RangeError(`the generator's position must be an integer in 0..${N}, got ${pos}`);
}

/**
 * n values low + w * random(), as f32 (w = high - low, computed by the caller as it
 * would be in Python). Returns {values: Float32Array, pos}; `key` is moved on in place.
 */
export function uniform(key, pos, n, low, w) {
  checkKey(key, pos);
  const s = new Twister(key, pos);
  const values = new Float32Array(n);
  for (let i = 0; i < n; i++) values[i] = low + w * s.random();
  return { values, pos: s.pos };
}

/**
 * n (even) values gauss(mean, std), as f32: a pair from each two random()s, cos first.
 * Math.log/cos/sin may differ from the libm of Python's `math` in the last bits of a
 * double, which moves an f32 value whose double lies that close to a rounding boundary:
 * every value within `margin` (relative) of one is listed in `fix` as [index, u1, u2]
 * triples, for the caller to compute again with `math`. Returns {values, pos, fix}.
 */
export function normal(key, pos, n, mean, std, margin) {
  checkKey(key, pos);
  if (n % 2) throw new RangeError(`normal: draws pairs, got an odd count ${n}`);
  const s = new Twister(key, pos);
  const values = new Float32Array(n);
  const fix = [];
  const lo = 1 - margin, hi = 1 + margin;
  for (let i = 0; i < n; i += 2) {
    const u1 = s.random(), u2 = s.random();
    const x2pi = u1 * TWOPI, g2rad = Math.sqrt(-2.0 * Math.log(1.0 - u2));
    const t0 = Math.cos(x2pi) * g2rad * std, t1 = Math.sin(x2pi) * g2rad * std;
    values[i] = mean + t0;
    values[i + 1] = mean + t1;
    if (Math.fround(mean + t0 * lo) !== Math.fround(mean + t0 * hi)) fix.push(i, u1, u2);
    if (Math.fround(mean + t1 * lo) !== Math.fround(mean + t1 * hi)) fix.push(i + 1, u1, u2);
  }
  return { values, pos: s.pos, fix: Float64Array.from(fix) };
}

// ops/random.py's lowbias32, on u32 words
function lowbias32(x) {
  x ^= x >>> 16;
  x = Math.imul(x, 0x7feb352d);
  x ^= x >>> 15;
  x = Math.imul(x, 0x846ca68b);
  return (x ^ (x >>> 16)) >>> 0;
}

const bits = (k, c) => lowbias32((lowbias32((c ^ k) >>> 0) + k) >>> 0);

/**
 * n initial values of init_draw's stream for the key k (key(seed, stream), a u32):
 * its integers ("uniform" or "normal"), times scale, plus shift, each rounded to f32.
 */
export function counter(k, dist, n, scale, shift) {
  if (dist !== "uniform" && dist !== "normal") throw new RangeError(`counter: dist must be uniform or normal, got ${dist}`);
  const values = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    let v;
    if (dist === "uniform") v = 2 * (bits(k, i) >>> 8) - 0xffffff;
    else {
      let s = 0;
      for (let j = 0; j < 6; j++) {
        const h = bits(k, (6 * i + j) >>> 0);
        s += (h & 0xffff) + (h >>> 16);
      }
      v = 2 * s - 786420;
    }
    values[i] = Math.fround(Math.fround(v * scale) + shift);
  }
  return values;
}

/** The index of the first NaN or infinity in a Float32Array, or -1. */
export function firstNonfinite(values) {
  for (let i = 0; i < values.length; i++) if (!Number.isFinite(values[i])) return i;
  return -1;
}
