// The bench page's side of benchmarks/bench.py: runs tgweb (through tgweb.mjs, in
// its worker), TensorFlow.js and jax-js on the same model, data and initial
// weights, and times them the same way. Page-wide WebGPU counters come from
// instrument.js (window.__gpuStats).

import { start } from "/tgweb.mjs";
import * as gpu from "/gpu.mjs";

const now = () => performance.now(); // ms since this page's navigation start
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); const n = s.length;
  return n ? (n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : null; };
const stats = () => ({ ...(globalThis.__gpuStats || {}) });

function toArrays(batches) {
  return batches.map((b) => Object.fromEntries(Object.entries(b).map(([k, v]) =>
    [k, k === "tokens" || k === "targets" ? Int32Array.from(v) : Float32Array.from(v)])));
}

// ------------------------------------------------------------------ tgweb

let tg = null;

/** Page load -> tgweb started -> compiled -> first step done (cold start), in one go. */
export async function tgwebCold(model, batches, source1) {
  const arrays = toArrays(batches);
  const globals = {};
  arrays.forEach((b, i) => { for (const [k, v] of Object.entries(b)) globals[`B_${i}_${k}`] = v; });
  globals.MODEL = model;
  globals.NBATCH = arrays.length;
  const t0 = now();
  tg = await start({ base: "/" });
  const tStarted = now();
  const r = await tg.run(source1, { globals, filename: "bench_cold.py" });
  const tFirst = now();
  return { ...r, cold_start_ms: tFirst, start_ms: tStarted - t0, page_to_start_call_ms: t0,
    first_run_ms: tFirst - tStarted, info: tg.info };
}

export async function tgwebRun(source, globals = {}) {
  return tg.run(source, { globals, filename: "bench_steps.py" });
}

/** The page's adapter as gpu.mjs describes it to tgweb (class, optional features, subgroup sizes). */
export async function adapterInfo() {
  return gpu.adapterInfo(await navigator.gpu.requestAdapter());
}

/**
 * A device for replaying `program` with gpu.mjs alone: the adapter's maxima of the limits
 * the Program depends on, the optional features it lists (subgroups, for a real GPU's
 * kernels) and timestamp queries where the adapter has them.
 */
async function replicaDevice(program) {
  const adapter = await navigator.gpu.requestAdapter();
  const hasTs = adapter.features.has("timestamp-query");
  const requiredLimits = {};
  for (const [k, v] of Object.entries(gpu.programLimits(program))) {
    if (k in adapter.limits && v > 0) requiredLimits[k] = adapter.limits[k];
  }
  const needs = (program.meta && program.meta.features) || [];
  const device = await adapter.requestDevice({ requiredFeatures: [...needs, ...(hasTs ? ["timestamp-query"] : [])], requiredLimits });
  return { device, hasTs, adapter };
}

/**
 * The same Program run from the page with gpu.mjs alone (no Python): ms per step of the
 * shim, the page-measured dispatches, pipelines and peak GPU bytes, and per-kernel GPU
 * times from timestamp queries (one compute pass per kernel) and from gpu.mjs profile().
 */
export async function tgwebReplica(programJson, params, scalars, batches, { warmup = 5, warmupMs = 0, steps = 20, blocks = 3, repeats = 5 } = {}) {
  const program = gpu.parseProgram(programJson);
  const { device, hasTs } = await replicaDevice(program);
  const s0 = stats();
  const t0 = now();
  const rt = await gpu.instantiate(device, program);
  const instantiateMs = now() - t0;
  for (const [n, v] of Object.entries(params)) rt.write("params", n, Float32Array.from(v));
  const inputs = toArrays(batches).map((b) => Object.fromEntries(Object.entries(b).filter(([k]) => k in program.inputs)));
  const loss = [["outputs", "loss"]];
  // warm-up: `warmup` steps and at least warmupMs of them (as every framework here)
  for (let i = 0, t = now(); i < warmup || now() - t < warmupMs; i++) await rt.run(inputs[i % inputs.length], scalars, loss);
  const d0 = stats().dispatches;
  const per = [];
  let last;
  for (let i = 0; i < steps; i++) {
    const t = now();
    last = await rt.run(inputs[i % inputs.length], scalars, loss);
    per.push(now() - t);
  }
  const dispatchesPerStep = (stats().dispatches - d0) / steps;
  const blk = [];
  for (let j = 0; j < blocks; j++) {
    const t = now();
    for (let i = 0; i < 10; i++) {
      const p = rt.run(inputs[i % inputs.length], scalars, i === 9 ? loss : []);
      if (i === 9) await p;
    }
    blk.push((now() - t) / 10);
  }
  // GPU time per kernel: timestamp queries around each kernel's own compute pass
  const kernels = [];
  let tsStep = [];
  if (hasTs) {
    const n = rt.steps.length;
    const qs = device.createQuerySet({ type: "timestamp", count: 2 * n + 2 });
    const resolve = device.createBuffer({ size: 8 * (2 * n + 2), usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
    const read = device.createBuffer({ size: 8 * (2 * n + 2), usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
    const samples = rt.steps.map(() => []);
    for (let r = 0; r < repeats; r++) {
      rt.writePacked(rt.pack(inputs[r % inputs.length], scalars));
      const enc = device.createCommandEncoder();
      rt.steps.forEach((s, i) => {
        const pass = enc.beginComputePass({ timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 2 * i, endOfPassWriteIndex: 2 * i + 1 } });
        pass.setPipeline(s.pipeline);
        pass.setBindGroup(0, s.bindGroup);
        pass.dispatchWorkgroups(s.dispatch[0], s.dispatch[1] || 1, s.dispatch[2] || 1);
        pass.end();
      });
      // and the whole step as one pass (as rt.run records it)
      const pass = enc.beginComputePass({ timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 2 * n, endOfPassWriteIndex: 2 * n + 1 } });
      for (const s of rt.steps) {
        pass.setPipeline(s.pipeline);
        pass.setBindGroup(0, s.bindGroup);
        pass.dispatchWorkgroups(s.dispatch[0], s.dispatch[1] || 1, s.dispatch[2] || 1);
      }
      pass.end();
      enc.resolveQuerySet(qs, 0, 2 * n + 2, resolve, 0);
      enc.copyBufferToBuffer(resolve, 0, read, 0, 8 * (2 * n + 2));
      device.queue.submit([enc.finish()]);
      await read.mapAsync(GPUMapMode.READ);
      const t = new BigUint64Array(read.getMappedRange().slice(0));
      read.unmap();
      for (let i = 0; i < n; i++) samples[i].push(Number(t[2 * i + 1] - t[2 * i]) / 1e6);
      tsStep.push(Number(t[2 * n + 1] - t[2 * n]) / 1e6);
    }
    rt.steps.forEach((s, i) => kernels.push({ i, kernel: s.kernel.name, ops: s.kernel.ops || [], dispatch: s.dispatch,
      ts_ms: median(samples[i]) }));
    qs.destroy(); resolve.destroy(); read.destroy();
  }
  // host-timed, one submit per kernel (gpu.mjs Runtime.profile)
  const hostRuns = [];
  for (let r = 0; r < Math.min(repeats, 3); r++) hostRuns.push(await profileKernels(rt, inputs[r % inputs.length], scalars));
  hostRuns[0].forEach((k, i) => {
    const row = kernels[i] || { i, kernel: k.kernel, ops: k.ops, dispatch: k.dispatch };
    row.host_ms = median(hostRuns.map((h) => h[i].ms));
    kernels[i] = row;
  });
  const s1 = stats();
  const out = {
    shim_ms_per_step_read_every: median(per), shim_ms_per_step_read_every10: median(blk),
    shim_step_ms_all: per, instantiate_ms: instantiateMs, dispatches_per_step: dispatchesPerStep,
    pipelines_created: s1.pipelines - s0.pipelines, unique_pipelines: rt.pipelineCount,
    peak_gpu_bytes: s1.peak, live_gpu_bytes: s1.live, timestamp_query: hasTs,
    ts_step_ms: median(tsStep), kernels, last_loss: new Float32Array(last[0])[0],
  };
  rt.destroy();
  device.destroy();
  return out;
}

/**
 * GPU time of a product's Program (from benchmarks/matmul_browser.py): its inputs filled
 * with uniform noise here, then `reps` runs of its kernels in one compute pass between
 * two timestamp queries, `repeats` times; the median ms per run (and `samples` sampled
 * entries of the result, for a check against NumPy).
 */
export async function tgwebKernelTime(programJson, { reps = 10, repeats = 5, only = null, samples = 0 } = {}) {
  const program = gpu.parseProgram(programJson);
  const { device, hasTs, adapter } = await replicaDevice(program);
  if (!hasTs) throw new Error("this adapter has no timestamp queries");
  const rt = await gpu.instantiate(device, program);
  const inputs = {};
  for (const [name, spec] of Object.entries(program.inputs)) {
    const a = new Float32Array(spec.shape.reduce((x, y) => x * y, 1));
    for (let i = 0; i < a.length; i++) a[i] = Math.random() * 2 - 1;
    rt.write("inputs", name, a);
    inputs[name] = a;
  }
  // only: time just the kernels whose ops include it (a mixed product's matmul, not the
  // f16 copies of its operands), after one run of every kernel
  const timed = only ? rt.steps.filter((s) => s.kernel.ops.includes(only)) : rt.steps;
  if (only) {
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    for (const s of rt.steps) {
      pass.setPipeline(s.pipeline);
      pass.setBindGroup(0, s.bindGroup);
      pass.dispatchWorkgroups(s.dispatch[0], s.dispatch[1] || 1, s.dispatch[2] || 1);
    }
    pass.end();
    device.queue.submit([enc.finish()]);
  }
  const qs = device.createQuerySet({ type: "timestamp", count: 2 });
  const resolve = device.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
  const read = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const ms = [];
  for (let r = 0; r <= repeats; r++) {  // the first is a warm-up
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass({ timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } });
    for (let i = 0; i < reps; i++) {
      for (const s of timed) {  // every kernel of the product (split-k: the slices, then their sum)
        pass.setPipeline(s.pipeline);
        pass.setBindGroup(0, s.bindGroup);
        pass.dispatchWorkgroups(s.dispatch[0], s.dispatch[1] || 1, s.dispatch[2] || 1);
      }
    }
    pass.end();
    enc.resolveQuerySet(qs, 0, 2, resolve, 0);
    enc.copyBufferToBuffer(resolve, 0, read, 0, 16);
    device.queue.submit([enc.finish()]);
    await read.mapAsync(GPUMapMode.READ);
    const t = new BigUint64Array(read.getMappedRange().slice(0));
    read.unmap();
    if (r > 0) ms.push(Number(t[1] - t[0]) / 1e6 / reps);
  }
  const info = adapter.info;
  const out = { ms: median(ms), all_ms: ms, kernel: timed.map((s) => s.kernel.name).join(" + "),
    dispatch: timed[0].dispatch, samples: samples ? await sampleProduct(rt, program, inputs, samples) : [],
    adapter: { vendor: info.vendor, architecture: info.architecture, description: info.description, device: info.device } };
  qs.destroy(); resolve.destroy(); read.destroy(); rt.destroy(); device.destroy();
  return out;
}

/**
 * `count` sampled entries of a product Program's output "loss" = a @ b (a: M x K, b: K x N,
 * as matmul_browser.py builds it, both stored untransposed): each entry's (i, j), value,
 * and A's row i and B's column j, for the caller's reference (NumPy).
 */
async function sampleProduct(rt, program, inputs, count) {
  const [M, K] = program.inputs.a.shape, N = program.inputs.b.shape[1];
  const c = new Float32Array(await rt.read("outputs", "loss"));
  const out = [];
  for (let t = 0; t < count; t++) {
    const i = Math.floor(Math.random() * M), j = Math.floor(Math.random() * N);
    const col = new Array(K);
    for (let k = 0; k < K; k++) col[k] = inputs.b[k * N + j];
    out.push({ i, j, c: c[i * N + j], a: Array.from(inputs.a.subarray(i * K, (i + 1) * K)), b: col });
  }
  return out;
}

// ------------------------------------------------------------------ peers

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = src;
    s.onload = resolve;
    s.onerror = () => reject(new Error(`could not load ${src}`));
    document.head.appendChild(s);
  });
}

async function loadPeer(fw) {
  if (fw === "tfjs") {
    await loadScript("/nm/@tensorflow/tfjs/dist/tf.min.js");
    await loadScript("/nm/@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js");
    return import("/peers/tfjs.mjs");
  }
  if (fw === "jaxjs") return import("/peers/jaxjs.mjs");
  throw new Error(`unknown peer ${fw}`);
}

/** A peer from page load: import, set up, build, first step (cold start), then timed steps. */
export async function peer(fw, model, init, batches, { warmup = 5, warmupMs = 0, steps = 20, blocks = 3, budgetMs = Infinity } = {}) {
  const out = { fw, model };
  const arrays = toArrays(batches);
  const t0 = now();
  const mod = await loadPeer(fw);
  out.setup = await mod.setup();
  out.load_ms = now() - t0;
  const m = model === "sin" ? mod.sinModel(init) : mod.additionModel(init);
  const s0 = stats();
  let t = now();
  const losses = [await mod.readScalar(m.step(arrays[0]))];
  out.first_step_ms = now() - t;
  out.cold_start_ms = now();
  out.pipelines_first_step = stats().pipelines - s0.pipelines;
  // warm-up: `warmup` steps and at least warmupMs of them (as every framework here)
  const tWarm = now();
  for (let i = 1; i <= warmup || now() - tWarm < warmupMs; i++) losses.push(await mod.readScalar(m.step(arrays[i % arrays.length])));
  warmup = losses.length - 1;
  out.warmup_steps = warmup;
  const d0 = stats().dispatches, p0 = stats().pipelines;
  const per = [];
  const tLoop = now();
  // a very slow peer stops after 10 steps once the time budget is spent (out.steps_timed says)
  for (let i = 0; i < steps && !(i >= 10 && now() - tLoop > budgetMs); i++) {
    t = now();
    losses.push(await mod.readScalar(m.step(arrays[(warmup + 1 + i) % arrays.length])));
    per.push(now() - t);
  }
  out.steps_timed = per.length;
  out.dispatches_per_step = (stats().dispatches - d0) / per.length;
  out.pipelines_created_in_steady_state = stats().pipelines - p0;
  const blk = [];
  for (let j = 0; j < blocks && !(j >= 1 && now() - tLoop > budgetMs); j++) {
    t = now();
    for (let i = 0; i < 10; i++) {
      const l = m.step(arrays[i % arrays.length]);
      if (i === 9) losses.push(await mod.readScalar(l));
      else mod.dispose(l);
    }
    blk.push((now() - t) / 10);
  }
  const s = stats();
  Object.assign(out, { ms_per_step_read_every: median(per), ms_per_step_read_every10: median(blk), step_ms_all: per,
    block_ms: blk, unique_pipelines: s.pipelines, peak_gpu_bytes: s.peak, losses });
  return out;
}

/**
 * One step with each kernel in its own submit, timed on the host until the queue is
 * idle: [{kernel, ops, site, dispatch, ms}] in order. State updates as in a real step.
 */
async function profileKernels(rt, inputs, scalars) {
  await rt.queue;
  rt.writePacked(rt.pack(inputs, scalars));
  await rt.device.queue.onSubmittedWorkDone();
  const out = [];
  for (const s of rt.steps) {
    const t = performance.now();
    const enc = rt.device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(s.pipeline);
    pass.setBindGroup(0, s.bindGroup);
    pass.dispatchWorkgroups(...s.dispatch);
    pass.end();
    rt.device.queue.submit([enc.finish()]);
    await rt.device.queue.onSubmittedWorkDone();
    out.push({ kernel: s.kernel.name, ops: s.kernel.ops || [], site: s.kernel.site || "",
      dispatch: s.dispatch, ms: performance.now() - t });
  }
  return out;
}
