// TensorFlow.js (WebGPU backend) versions of the sin and addition samples, for
// benchmarks/bench.py. Same shapes, batch, optimizer, schedule and clipping as
// tgweb/samples/{sin,addition}.py; weights start from tgweb's initial values
// (handed in by the bench). tf is the UMD global of @tensorflow/tfjs 4.22.0 with
// @tensorflow/tfjs-backend-webgpu loaded after it.

const tf = globalThis.tf;

export async function setup() {
  await tf.setBackend("webgpu");
  await tf.ready();
  return { backend: tf.getBackend(), version: tf.version.tfjs };
}

// Adam/AdamW written out (tfjs has no AdamW); decoupled decay p *= 1 - lr*wd first,
// as tgweb's AdamW (torch.optim.AdamW).
function adamUpdate(vars, grads, state, t, lr, { b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0, decays = {} }) {
  const bc1 = 1 - Math.pow(b1, t), bc2 = 1 - Math.pow(b2, t);
  tf.tidy(() => {
    for (const [name, p] of Object.entries(vars)) {
      const g = grads[name];
      const m = state.m[name], v = state.v[name];
      const m2 = m.mul(b1).add(g.mul(1 - b1));
      const v2 = v.mul(b2).add(g.square().mul(1 - b2));
      m.assign(m2);
      v.assign(v2);
      let base = p;
      if (wd && decays[name]) base = p.mul(1 - lr * wd);
      const upd = m2.div(bc1).div(v2.div(bc2).sqrt().add(eps)).mul(lr);
      p.assign(base.sub(upd));
    }
  });
}

function makeVars(init) {
  const vars = {}, state = { m: {}, v: {} };
  for (const [name, { shape, data }] of Object.entries(init)) {
    vars[name] = tf.variable(tf.tensor(Float32Array.from(data), shape), true, name);
    state.m[name] = tf.variable(tf.zeros(shape), false, name + ".m");
    state.v[name] = tf.variable(tf.zeros(shape), false, name + ".v");
  }
  return { vars, state };
}

// y = x @ W^T + b with W [out, in] as in tgweb's nn.Linear
const linear = (x, w, b) => {
  const y = tf.matMul(x, w, false, true);
  return b ? y.add(b) : y;
};

export function sinModel(init) {
  const { vars, state } = makeVars(init);
  const V = vars;
  const lossFn = (x, y) => {
    let h = tf.relu(linear(x, V["net.0.weight"], V["net.0.bias"]));
    h = tf.relu(linear(h, V["net.2.weight"], V["net.2.bias"]));
    const p = linear(h, V["net.4.weight"], V["net.4.bias"]);
    return p.sub(y).square().mean();
  };
  let t = 0;
  return {
    // one training step; returns the loss as a scalar tensor (the caller reads or disposes it)
    step(batch) {
      t += 1;
      const x = tf.tensor2d(batch.x, [batch.x.length, 1]);
      const y = tf.tensor2d(batch.y, [batch.y.length, 1]);
      const { value, grads } = tf.variableGrads(() => lossFn(x, y));
      adamUpdate(V, grads, state, t, 5e-3, {});
      tf.dispose([x, y, grads]);
      return value;
    },
    names: Object.keys(vars),
  };
}

export function additionModel(init, { batch = 128, ctx = 8, dim = 64, heads = 4, layers = 3, steps = 1500 } = {}) {
  const { vars, state } = makeVars(init);
  const V = vars;
  const hd = dim / heads;
  // causal mask [t, t]: 0 on and below the diagonal, -1e9 above
  const mask = tf.tidy(() => tf.linalg.bandPart(tf.ones([ctx, ctx]), -1, 0).sub(1).mul(1e9));
  const layerNorm = (x, w, b) => {
    const { mean, variance } = tf.moments(x, -1, true);
    return x.sub(mean).div(variance.add(1e-5).sqrt()).mul(w).add(b);
  };
  const split = (y) => y.reshape([batch, ctx, heads, hd]).transpose([0, 2, 1, 3]);
  const forward = (tokens) => {
    let x = tf.gather(V["tok.weight"], tokens.reshape([-1])).reshape([batch, ctx, dim]);
    x = x.add(V["pos"].slice([0, 0], [ctx, dim]));
    for (let i = 0; i < layers; i++) {
      const p = `blocks.${i}.`;
      const h = layerNorm(x, V[p + "ln1.weight"], V[p + "ln1.bias"]).reshape([batch * ctx, dim]);
      const q = split(linear(h, V[p + "attn.q.weight"]));
      const k = split(linear(h, V[p + "attn.k.weight"]));
      const v = split(linear(h, V[p + "attn.v.weight"]));
      const s = tf.matMul(q, k, false, true).mul(1 / Math.sqrt(hd)).add(mask);
      const w = tf.softmax(s, -1);
      const a = tf.matMul(w, v).transpose([0, 2, 1, 3]).reshape([batch * ctx, dim]);
      x = x.add(linear(a, V[p + "attn.o.weight"]).reshape([batch, ctx, dim]));
      const h2 = layerNorm(x, V[p + "ln2.weight"], V[p + "ln2.bias"]).reshape([batch * ctx, dim]);
      const f = linear(tf.relu(linear(h2, V[p + "fc1.weight"], V[p + "fc1.bias"])), V[p + "fc2.weight"], V[p + "fc2.bias"]);
      x = x.add(f.reshape([batch, ctx, dim]));
    }
    x = layerNorm(x, V["ln_f.weight"], V["ln_f.bias"]).reshape([batch * ctx, dim]);
    return tf.matMul(x, V["tok.weight"], false, true).reshape([batch, ctx, -1]);
  };
  const lossFn = (tokens, targets) => {
    const logits = forward(tokens).slice([0, 5, 0], [batch, 3, -1]);
    const tg = targets.slice([0, 5], [batch, 3]);
    const logp = tf.logSoftmax(logits, -1);
    const onehot = tf.oneHot(tg.reshape([-1]), logits.shape[2]).reshape(logits.shape);
    return logp.mul(onehot).sum(-1).mean().neg();
  };
  // weight decay where tgweb applies it (not on biases and norm gains): init[name].decay
  const decays = {};
  for (const [n, p] of Object.entries(init)) decays[n] = !!p.decay;
  let t = 0;
  return {
    step(b) {
      t += 1;
      const lr = 5e-3 + (5e-4 - 5e-3) * Math.min(t - 1, steps) / steps;
      const tokens = tf.tensor2d(b.tokens, [batch, ctx], "int32");
      const targets = tf.tensor2d(b.targets, [batch, ctx], "int32");
      const { value, grads } = tf.variableGrads(() => lossFn(tokens, targets));
      const clipped = tf.tidy(() => {
        const sumsq = tf.addN(Object.values(grads).map((g) => g.square().sum()));
        const coef = tf.minimum(tf.scalar(1.0).div(sumsq.sqrt().add(1e-6)), 1.0);
        const out = {};
        for (const [n, g] of Object.entries(grads)) out[n] = g.mul(coef);
        return out;
      });
      adamUpdate(V, clipped, state, t, lr, { wd: 0.01, decays });
      tf.dispose([tokens, targets, grads, clipped]);
      return value;
    },
    names: Object.keys(vars),
  };
}

export async function readScalar(t) {
  const d = await t.data();
  t.dispose();
  return d[0];
}
export const dispose = (t) => t.dispose();
export const sync = async () => { const z = tf.zeros([1]); await z.data(); z.dispose(); };
