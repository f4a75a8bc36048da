// jax-js (WebGPU device) versions of the sin and addition samples, for
// benchmarks/bench.py: the whole training step (forward, backward, clipping,
// Adam/AdamW) is one jit-compiled function. Same shapes, batch, optimizer,
// schedule and clipping as tgweb/samples/{sin,addition}.py; weights start from
// tgweb's initial values (handed in by the bench).
//
// jax-js moves ownership of arrays into every call: a value used twice is passed
// as `.ref` the first time (see the jax-js README, "Reference counting").

import { numpy as np, nn, jit, valueAndGrad, tree, init as jaxInit, defaultDevice } from "/nm/@jax-js/jax/dist/index.js";

export async function setup() {
  const devices = await jaxInit("webgpu");
  if (!devices.includes("webgpu")) throw new Error(`jax-js: no webgpu device (got ${devices.join(", ")})`);
  defaultDevice("webgpu");
  return { backend: "webgpu" };
}

function params(init) {
  const out = {};
  for (const [name, { shape, data }] of Object.entries(init)) out[name] = np.array(Float32Array.from(data)).reshape(shape);
  return out;
}
const zerosLike = (init) => Object.fromEntries(Object.entries(init).map(([n, { shape }]) => [n, np.zeros(shape)]));

// y = x @ W^T + b, W [out, in] as in tgweb's nn.Linear
const linear = (x, w, b) => {
  const y = np.matmul(x, w.transpose());
  return b ? y.add(b) : y;
};

// Adam / AdamW (decoupled decay first, as torch.optim.AdamW) over a dict of params;
// h = {lr, bc1, bc2} are arrays so that one compiled step serves every step
function adam(P, G, M, Vs, h, { b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0, decays = {} }) {
  const P2 = {}, M2 = {}, V2 = {};
  for (const n of Object.keys(P)) {
    const g = G[n];
    const m = M[n].mul(b1).add(g.ref.mul(1 - b1));
    const v = Vs[n].mul(b2).add(g.ref.mul(g).mul(1 - b2));
    let p = P[n];
    if (wd && decays[n]) p = p.ref.sub(p.mul(h.lr.ref).mul(wd));
    const upd = m.ref.div(h.bc1.ref).div(np.sqrt(v.ref.div(h.bc2.ref)).add(eps)).mul(h.lr.ref);
    P2[n] = p.sub(upd);
    M2[n] = m;
    V2[n] = v;
  }
  h.lr.dispose(); h.bc1.dispose(); h.bc2.dispose();
  return [P2, M2, V2];
}

function hyper(t, lr) {
  return { lr: np.array([lr]), bc1: np.array([1 - Math.pow(0.9, t)]), bc2: np.array([1 - Math.pow(0.999, t)]) };
}

export function sinModel(init) {
  let P = params(init), M = zerosLike(init), V = zerosLike(init);
  const lossFn = (p, x, y) => {
    let h = nn.relu(linear(x, p["net.0.weight"], p["net.0.bias"]));
    h = nn.relu(linear(h, p["net.2.weight"], p["net.2.bias"]));
    const d = linear(h, p["net.4.weight"], p["net.4.bias"]).sub(y);
    return d.ref.mul(d).mean();
  };
  const step = jit((p, m, v, x, y, h) => {
    const [loss, g] = valueAndGrad(lossFn)(tree.ref(p), x, y);
    const [p2, m2, v2] = adam(p, g, m, v, h, {});
    return [loss, p2, m2, v2];
  });
  let t = 0;
  return {
    step(b) {
      t += 1;
      const x = np.array(b.x).reshape([b.x.length, 1]), y = np.array(b.y).reshape([b.y.length, 1]);
      const [loss, p2, m2, v2] = step(P, M, V, x, y, hyper(t, 5e-3));
      P = p2; M = m2; V = v2;
      return loss;
    },
  };
}

export function additionModel(init, { batch = 128, ctx = 8, dim = 64, heads = 4, layers = 3, steps = 1500, vocab = 12 } = {}) {
  let P = params(init), M = zerosLike(init), V = zerosLike(init);
  const decays = Object.fromEntries(Object.entries(init).map(([n, p]) => [n, !!p.decay]));
  const hd = dim / heads;
  // additive causal mask [t, t] as a plain typed array (made into an array per trace)
  const maskData = new Float32Array(ctx * ctx);
  for (let i = 0; i < ctx; i++) for (let j = i + 1; j < ctx; j++) maskData[i * ctx + j] = -1e9;
  const layerNorm = (x, w, b) => {
    const mu = x.ref.mean(-1, { keepdims: true });
    const xc = x.sub(mu);
    const var_ = xc.ref.mul(xc.ref).mean(-1, { keepdims: true });
    return xc.div(np.sqrt(var_.add(1e-5))).mul(w).add(b);
  };
  const split = (y) => y.reshape([batch, ctx, heads, hd]).transpose([0, 2, 1, 3]);
  const lossFn = (p, tokens, targets, mask) => {
    const tok = p["tok.weight"];
    // the embedding as one_hot(tokens) @ E: np.take's gradient is a scatter, which jax-js
    // 0.1.25 cannot jit ("routine primitive scatter input is not imm")
    let x = np.matmul(nn.oneHot(tokens.reshape([-1]), vocab), tok.ref).reshape([batch, ctx, dim]);
    x = x.add(p["pos"].slice([0, ctx], []));
    for (let i = 0; i < layers; i++) {
      const q_ = `blocks.${i}.`;
      const h = layerNorm(x.ref, p[q_ + "ln1.weight"], p[q_ + "ln1.bias"]).reshape([batch * ctx, dim]);
      const q = split(linear(h.ref, p[q_ + "attn.q.weight"]));
      const k = split(linear(h.ref, p[q_ + "attn.k.weight"]));
      const v = split(linear(h, p[q_ + "attn.v.weight"]));
      const s = np.matmul(q, k.transpose([0, 1, 3, 2])).mul(1 / Math.sqrt(hd)).add(mask.ref);
      const w = nn.softmax(s, -1);
      const a = np.matmul(w, v).transpose([0, 2, 1, 3]).reshape([batch * ctx, dim]);
      x = x.add(linear(a, p[q_ + "attn.o.weight"]).reshape([batch, ctx, dim]));
      const h2 = layerNorm(x.ref, p[q_ + "ln2.weight"], p[q_ + "ln2.bias"]).reshape([batch * ctx, dim]);
      const f = linear(nn.relu(linear(h2, p[q_ + "fc1.weight"], p[q_ + "fc1.bias"])), p[q_ + "fc2.weight"], p[q_ + "fc2.bias"]);
      x = x.add(f.reshape([batch, ctx, dim]));
    }
    mask.dispose();
    x = layerNorm(x, p["ln_f.weight"], p["ln_f.bias"]).reshape([batch * ctx, dim]);
    const logits = np.matmul(x, tok.transpose()).reshape([batch, ctx, vocab]).slice([], [5, 8], []);
    const logp = nn.logSoftmax(logits, -1);
    const onehot = nn.oneHot(targets.slice([], [5, 8]), vocab);
    return logp.mul(onehot).sum(-1).mean().neg();
  };
  const step = jit((p, m, v, tokens, targets, mask, h) => {
    const [loss, g] = valueAndGrad(lossFn)(tree.ref(p), tokens, targets, mask);
    let sumsq = null;
    for (const n of Object.keys(g)) {
      const s = g[n].ref.mul(g[n].ref).sum();
      sumsq = sumsq === null ? s : sumsq.add(s);
    }
    const coef = np.minimum(np.reciprocal(np.sqrt(sumsq).add(1e-6)), 1.0);
    const gc = {};
    for (const n of Object.keys(g)) gc[n] = g[n].mul(coef.ref);
    coef.dispose();
    const [p2, m2, v2] = adam(p, gc, m, v, h, { wd: 0.01, decays });
    return [loss, p2, m2, v2];
  });
  let t = 0;
  return {
    step(b) {
      t += 1;
      const lr = 5e-3 + (5e-4 - 5e-3) * Math.min(t - 1, steps) / steps;
      const tokens = np.array(b.tokens, { dtype: np.int32 }).reshape([batch, ctx]);
      const targets = np.array(b.targets, { dtype: np.int32 }).reshape([batch, ctx]);
      const mask = np.array(maskData).reshape([ctx, ctx]);
      const [loss, p2, m2, v2] = step(P, M, V, tokens, targets, mask, hyper(t, lr));
      P = p2; M = m2; V = v2;
      return loss;
    },
  };
}

export async function readScalar(a) {
  const d = await a.data();
  return d[0];
}
export const dispose = (a) => a.dispose();
export const sync = async () => { const z = np.zeros([1]); await z.data(); };
