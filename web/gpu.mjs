// gpu.mjs: executes a tgweb Program on a WebGPU device, and nothing more.
//
// A Program (tgweb/program.py) is plain JSON: buffers, kernels (WGSL +
// bindings + dispatch), named slots (inputs, params, states, outputs, captures)
// and per-step scalars. This module allocates the buffers, creates one pipeline
// per distinct WGSL text (inside validation error scopes, so that a failure names
// the kernel's ops and the user's call site), creates every bind group once, and
// runs a step as one command encoder, one compute pass and one submit, reading
// back only the slots asked for. No dependencies, no build step: a saved Program
// runs with this file alone.
//
//   import { requestDevice, instantiate } from "./gpu.mjs";
//   const device = await requestDevice({ program });
//   const rt = await instantiate(device, program);
//   rt.write("params", "l1.weight", new Float32Array([...]));
//   const [loss] = await rt.run({ x, y }, { lr: 1e-3 }, [["outputs", "loss"]]);
//   new Float32Array(loss);   // every read comes back as an ArrayBuffer

const KINDS = ["inputs", "params", "states", "outputs", "captures"];
const WRITABLE = ["inputs", "params", "states"];
const ARRAYS = { f32: Float32Array, i32: Int32Array, bool: Uint32Array };
const USAGE = () => GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;

/** An error from running a Program; `kernel`, `ops`, `site` say where when known. */
export class ProgramError extends Error {
  constructor(message, extra = {}) {
    super(message);
    this.name = "ProgramError";
    Object.assign(this, extra);
  }
}

/** The device limits a Program needs (the WebGPU defaults where it needs less). */
export function programLimits(program) {
  program = parseProgram(program);
  let maxBuffer = 4, maxBindings = 0, maxDispatch = 1;
  for (const b of program.buffers) maxBuffer = Math.max(maxBuffer, b.size);
  for (const k of program.kernels) {
    maxBindings = Math.max(maxBindings, k.bindings.length);
    for (const d of k.dispatch) maxDispatch = Math.max(maxDispatch, d);
  }
  const need = {
    maxBufferSize: maxBuffer,
    maxStorageBufferBindingSize: maxBuffer,
    maxStorageBuffersPerShaderStage: maxBindings,
    maxComputeWorkgroupsPerDimension: maxDispatch,
  };
  // the compiler may state more (workgroup sizes, shared memory): take the larger
  const stated = (program.meta && program.meta.limits) || {};
  for (const [k, v] of Object.entries(stated)) {
    if (typeof v === "number") need[k] = Math.max(need[k] || 0, v);
  }
  return need;
}

/**
 * Request an adapter and a device. With `program`, asks for exactly the limits it
 * needs (an error names the first one the adapter lacks); without, asks for the
 * adapter's maxima of the limits compute work depends on, so that any Program the
 * adapter could run fits.
 */
export async function requestDevice({ program, adapter, powerPreference, onLost, onError } = {}) {
  if (typeof navigator === "undefined" || !navigator.gpu) {
    throw new ProgramError("WebGPU is not available here (navigator.gpu is missing): use a browser " +
      "with WebGPU enabled (Chrome/Edge 113+, Safari 26+, Firefox 141+), over https or http://localhost");
  }
  adapter = adapter || await navigator.gpu.requestAdapter(powerPreference ? { powerPreference } : {});
  if (!adapter) {
    throw new ProgramError("WebGPU is present but no GPU adapter was found (navigator.gpu.requestAdapter() " +
      "returned null): the GPU may be blocklisted or disabled in this browser");
  }
  const want = program ? programLimits(program) : {
    maxBufferSize: 0, maxStorageBufferBindingSize: 0, maxStorageBuffersPerShaderStage: 0,
    maxComputeWorkgroupsPerDimension: 0, maxComputeInvocationsPerWorkgroup: 0,
    maxComputeWorkgroupSizeX: 0, maxComputeWorkgroupSizeY: 0, maxComputeWorkgroupSizeZ: 0,
    maxComputeWorkgroupStorageSize: 0,
  };
  const requiredLimits = {};
  for (const [name, value] of Object.entries(want)) {
    if (!(name in adapter.limits)) continue;
    const have = adapter.limits[name];
    if (program && value > have) {
      throw new ProgramError(`the Program needs ${name} = ${value}, this adapter allows ${have}`);
    }
    requiredLimits[name] = program ? Math.max(value, 0) : have;
  }
  // ask only for raises over the defaults the spec guarantees; a lower value is an error
  const device = await adapter.requestDevice({ requiredLimits: program ? raiseOnly(requiredLimits) : requiredLimits });
  device.lost.then((info) => {
    if (onLost) onLost(info);
  });
  if (onError) device.addEventListener("uncapturederror", (e) => onError(e.error));
  return device;
}

const DEFAULTS = {
  maxBufferSize: 268435456, maxStorageBufferBindingSize: 134217728, maxStorageBuffersPerShaderStage: 8,
  maxComputeWorkgroupsPerDimension: 65535,
};

function raiseOnly(limits) {
  const out = {};
  for (const [k, v] of Object.entries(limits)) if (!(k in DEFAULTS) || v > DEFAULTS[k]) out[k] = v;
  return out;
}

/** Adapter description for display: vendor, architecture, description. */
export function adapterInfo(adapter) {
  const i = adapter.info || {};
  return { vendor: i.vendor || "", architecture: i.architecture || "", description: i.description || "",
    device: i.device || "" };
}

export function parseProgram(program) {
  if (typeof program === "string") program = JSON.parse(program);
  if (!program || !Array.isArray(program.buffers) || !Array.isArray(program.kernels)) {
    throw new ProgramError("not a tgweb Program (no buffers/kernels)");
  }
  if (program.version !== 2) throw new ProgramError(`Program version ${program.version} is not 2`);
  for (const k of program.kernels) {
    if (k.offsets === undefined) k.offsets = [];
    if (!Array.isArray(k.offsets)) throw new ProgramError(`kernel ${k.name}: offsets must be an array of u32`);
  }
  return program;
}

function slotBytes(slot) {
  let n = 1;
  for (const d of slot.shape) n *= d;
  return 4 * n;
}

function toBytes(data, what, dtype = "f32") {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (Array.isArray(data)) return new Uint8Array(new ARRAYS[dtype](data).buffer); // plain numbers: the slot's type
  throw new ProgramError(`${what}: expected an ArrayBuffer, a typed array or an array of numbers`);
}

function describeKernels(kernels) {
  const k = kernels[0];
  const ops = [...new Set(kernels.flatMap((x) => x.ops || []))];
  const more = kernels.length > 1 ? ` (and ${kernels.length - 1} more kernel(s) with the same WGSL)` : "";
  return { kernel: k.name, ops, site: k.site || "", text: `kernel ${k.name}${more}, ops [${ops.join(", ")}]` +
    (k.site ? `, at ${k.site}` : "") };
}

function compilerMessages(info, wgsl) {
  const lines = wgsl.split("\n");
  const out = [];
  for (const m of info.messages) {
    if (m.type !== "error") continue;
    let s = `  ${m.type}: ${m.message}`;
    if (m.lineNum > 0) {
      s = `  line ${m.lineNum}:${m.linePos}: ${m.message}\n    ${(lines[m.lineNum - 1] || "").trim()}`;
    }
    out.push(s);
  }
  return out;
}

async function createPipeline(device, kernels, layout) {
  const wgsl = kernels[0].wgsl;
  const where = describeKernels(kernels);
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ code: wgsl, label: kernels[0].name });
  const info = module.getCompilationInfo ? await module.getCompilationInfo() : { messages: [] };
  const moduleError = await device.popErrorScope();
  const messages = compilerMessages(info, wgsl);
  if (moduleError || messages.length) {
    throw new ProgramError(`WGSL compile failed in ${where.text}\n` +
      (messages.length ? messages.join("\n") : `  ${moduleError.message}`),
      { kernel: where.kernel, ops: where.ops, site: where.site, compiler: messages });
  }
  device.pushErrorScope("validation");
  let pipeline, err;
  try {
    pipeline = await device.createComputePipelineAsync({
      label: kernels[0].name, layout, compute: { module, entryPoint: "main" },
    });
  } catch (e) {
    err = e;
  }
  const scoped = await device.popErrorScope();
  err = err || scoped;
  if (err) {
    throw new ProgramError(`WebGPU pipeline creation failed in ${where.text}\n  ${err.message}`,
      { kernel: where.kernel, ops: where.ops, site: where.site });
  }
  return pipeline;
}

/**
 * Instantiate a Program on a device: buffers, pipelines and bind groups.
 * `shared` maps param names to GPUBuffers of another instance (see paramBuffer),
 * used instead of allocating those params' buffers.
 */
export async function instantiate(device, program, { shared = {} } = {}) {
  program = parseProgram(program);
  const t0 = performance.now();
  const need = programLimits(program);
  for (const [name, value] of Object.entries(need)) {
    if (name in device.limits && value > device.limits[name]) {
      let culprit = "";
      if (name.endsWith("Size")) {
        const b = program.buffers.reduce((a, x) => (x.size > a.size ? x : a));
        culprit = ` (buffer ${b.id} "${b.label}", ${b.size} bytes)`;
      }
      throw new ProgramError(`the Program needs ${name} = ${value}${culprit}, the device allows ${device.limits[name]}`);
    }
  }

  // buffers; a shared param brings its whole buffer (its slot's buffer id maps to it)
  const buffers = new Array(program.buffers.length);
  const owned = [];
  for (const [name, buf] of Object.entries(shared || {})) {
    const slot = program.params[name];
    if (!slot) throw new ProgramError(`shared: the Program has no param "${name}"`);
    buffers[slot.buffer] = buf;
  }
  device.pushErrorScope("out-of-memory");
  device.pushErrorScope("validation");
  for (const b of program.buffers) {
    if (buffers[b.id]) continue;
    const size = Math.max(4, Math.ceil(b.size / 4) * 4);
    buffers[b.id] = device.createBuffer({ size, usage: USAGE(), label: b.label || `${b.kind}#${b.id}` });
    owned.push(buffers[b.id]);
  }
  const allocError = (await device.popErrorScope()) || (await device.popErrorScope());
  if (allocError) {
    for (const b of owned) b.destroy();
    throw new ProgramError(`allocating the Program's buffers failed: ${allocError.message}`);
  }

  // every kernel's offsets (its uniform binding) in one buffer, a slice per kernel
  const align = device.limits.minUniformBufferOffsetAlignment || 256;
  let at = 0;
  const slices = program.kernels.map((k) => {
    const size = 16 * Math.ceil(k.offsets.length / 4);
    const slice = { offset: at, size };
    at += Math.ceil(size / align) * align;
    return slice;
  });
  const uniform = device.createBuffer({ size: Math.max(at, 16), usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    label: "offsets" });
  owned.push(uniform);
  const words = new Uint32Array(Math.max(at, 16) / 4);
  program.kernels.forEach((k, i) => words.set(k.offsets, slices[i].offset / 4));
  device.queue.writeBuffer(uniform, 0, words);
  const bindEntries = (k, i) => {
    const entries = k.bindings.map((b, j) => ({ binding: j, resource: { buffer: buffers[b.buffer] } }));
    if (k.offsets.length) entries.push({ binding: k.bindings.length, resource: { buffer: uniform, ...slices[i] } });
    return entries;
  };

  // pipelines, one per (WGSL, binding accesses), created concurrently
  const pipelineKey = (k) => k.bindings.map((b) => (b.access === "read" ? "r" : "w")).join("") + "\n" + k.wgsl;
  const groups = new Map();
  for (const k of program.kernels) {
    const key = pipelineKey(k);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(k);
  }
  const layouts = new Map();
  const pipelines = new Map();
  try {
    await Promise.all([...groups].map(async ([key, ks]) => {
      const entries = ks[0].bindings.map((b, i) => ({
        binding: i, visibility: GPUShaderStage.COMPUTE,
        buffer: { type: b.access === "read" ? "read-only-storage" : "storage" },
      }));
      if (ks[0].offsets.length) {
        entries.push({ binding: entries.length, visibility: GPUShaderStage.COMPUTE, buffer: { type: "uniform" } });
      }
      const bgl = device.createBindGroupLayout({ entries });
      const layout = device.createPipelineLayout({ bindGroupLayouts: [bgl] });
      layouts.set(key, bgl);
      pipelines.set(key, await createPipeline(device, ks, layout));
    }));
  } catch (e) {
    for (const b of owned) b.destroy();
    throw e;
  }

  // bind groups, once
  device.pushErrorScope("validation");
  const steps = program.kernels.map((k, i) => {
    const key = pipelineKey(k);
    const bindGroup = device.createBindGroup({ layout: layouts.get(key), label: k.name, entries: bindEntries(k, i) });
    return { kernel: k, pipeline: pipelines.get(key), bindGroup, dispatch: k.dispatch };
  });
  const bindError = await device.popErrorScope();
  if (bindError) {
    for (const b of owned) b.destroy();
    // find the kernel: redo one by one inside scopes (only on failure)
    for (const [i, s] of steps.entries()) {
      device.pushErrorScope("validation");
      device.createBindGroup({ layout: s.pipeline.getBindGroupLayout(0), entries: bindEntries(s.kernel, i) });
      const e = await device.popErrorScope();
      if (e) {
        const w = describeKernels([s.kernel]);
        throw new ProgramError(`bind group of ${w.text} is invalid: ${e.message}`, w);
      }
    }
    throw new ProgramError(`creating bind groups failed: ${bindError.message}`);
  }
  return new Runtime(device, program, buffers, owned, steps, performance.now() - t0, groups.size);
}

export class Runtime {
  constructor(device, program, buffers, owned, steps, setupMs, pipelineCount) {
    this.device = device;
    this.program = program;
    this.buffers = buffers;
    this.owned = owned;
    this.steps = steps;
    this.setupMs = setupMs;
    this.pipelineCount = pipelineCount;
    this.staging = null;
    this.queue = Promise.resolve(); // one readback at a time: the staging buffer is reused
    this.closed = false;
  }

  slot(kind, name) {
    if (!KINDS.includes(kind)) throw new ProgramError(`unknown slot kind "${kind}" (one of ${KINDS.join(", ")})`);
    const slot = this.program[kind][name];
    if (!slot) {
      const known = Object.keys(this.program[kind]);
      throw new ProgramError(`the Program has no ${kind.slice(0, -1)} "${name}"; it has: ${known.join(", ") || "none"}`);
    }
    return slot;
  }

  _check() {
    if (this.closed) throw new ProgramError("this Program instance was destroyed");
  }

  /** Overwrite a param, state or input with bytes (typed array or ArrayBuffer). */
  write(kind, name, data) {
    this._check();
    if (!WRITABLE.includes(kind)) throw new ProgramError(`cannot write ${kind}; writable: ${WRITABLE.join(", ")}`);
    const slot = this.slot(kind, name);
    const bytes = toBytes(data, `${kind} "${name}"`, slot.dtype);
    const want = slotBytes(slot);
    if (bytes.byteLength !== want) {
      throw new ProgramError(`${kind} "${name}": expected ${want / 4} values (shape [${slot.shape}]), ` +
        `got ${bytes.byteLength / 4}`);
    }
    this.device.queue.writeBuffer(this.buffers[slot.buffer], slot.offset || 0, bytes);
  }

  /** Write the per-step scalars: an object name -> number, or the raw words. */
  writeScalars(scalars) {
    const list = this.program.scalars || [];
    if (!list.length || this.program.scalars_buffer == null) return;
    let words;
    if (scalars instanceof ArrayBuffer || ArrayBuffer.isView(scalars)) {
      words = toBytes(scalars, "scalars");
      if (words.byteLength !== 4 * list.length) {
        throw new ProgramError(`scalars: expected ${list.length} words, got ${words.byteLength / 4}`);
      }
    } else {
      const buf = new ArrayBuffer(4 * list.length);
      const f = new Float32Array(buf), u = new Uint32Array(buf);
      const missing = list.filter((s) => !(s.name in (scalars || {}))).map((s) => s.name);
      if (missing.length) throw new ProgramError(`scalars missing: ${missing.join(", ")}`);
      list.forEach((s, i) => {
        if (s.type === "f32") f[i] = scalars[s.name];
        else u[i] = scalars[s.name] >>> 0;
      });
      words = new Uint8Array(buf);
    }
    this.device.queue.writeBuffer(this.buffers[this.program.scalars_buffer], 0, words);
  }

  /** Read a slot back: resolves to an ArrayBuffer of its bytes. */
  async read(kind, name) {
    const [out] = await this._submit(null, [[kind, name]]);
    return out;
  }

  /** Read several slots in one submit and one map: [[kind, name], ...] -> [ArrayBuffer, ...]. */
  async readMany(reads) {
    this._check();
    for (const [kind, name] of reads) this.slot(kind, name);
    return this._submit(null, reads);
  }

  /**
   * One step: write inputs and scalars, dispatch every kernel in one compute pass,
   * submit once, then read back `reads` ([kind, name] pairs) as ArrayBuffers, in order.
   */
  async run(inputs = {}, scalars = {}, reads = []) {
    this._check();
    const want = Object.keys(this.program.inputs);
    const given = Object.keys(inputs || {});
    const missing = want.filter((n) => !given.includes(n));
    const extra = given.filter((n) => !want.includes(n));
    if (missing.length || extra.length) {
      throw new ProgramError(`inputs: ` + (missing.length ? `missing ${missing.join(", ")}` : "") +
        (missing.length && extra.length ? "; " : "") + (extra.length ? `unknown ${extra.join(", ")}` : ""));
    }
    for (const [kind, name] of reads) this.slot(kind, name);
    // check every input before writing any, so that a bad one changes nothing
    for (const n of want) {
      const slot = this.program.inputs[n];
      const bytes = toBytes(inputs[n], `input "${n}"`, slot.dtype);
      if (bytes.byteLength !== slotBytes(slot)) {
        throw new ProgramError(`input "${n}": expected ${slotBytes(slot) / 4} values (shape [${slot.shape}]), ` +
          `got ${bytes.byteLength / 4}`);
      }
    }
    for (const n of want) this.write("inputs", n, inputs[n]);
    this.writeScalars(scalars);
    return this._submit(true, reads);
  }

  _submit(dispatch, reads) {
    const job = this.queue.then(() => this._submitNow(dispatch, reads));
    this.queue = job.catch(() => {});
    return job;
  }

  async _submitNow(dispatch, reads) {
    this._check();
    const device = this.device;
    const enc = device.createCommandEncoder();
    if (dispatch && this.steps.length) {
      const pass = enc.beginComputePass();
      for (const s of this.steps) {
        pass.setPipeline(s.pipeline);
        pass.setBindGroup(0, s.bindGroup);
        pass.dispatchWorkgroups(s.dispatch[0], s.dispatch[1] || 1, s.dispatch[2] || 1);
      }
      pass.end();
    }
    let total = 0;
    const spans = reads.map(([kind, name]) => {
      const slot = this.slot(kind, name);
      const span = { slot, at: total, size: slotBytes(slot) };
      total += span.size;
      return span;
    });
    if (total) {
      if (!this.staging || this.staging.size < total) {
        if (this.staging) this.staging.destroy();
        const size = Math.max(total, this.staging ? this.staging.size * 2 : 256);
        this.staging = device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
          label: "tgweb readback" });
      }
      for (const s of spans) {
        enc.copyBufferToBuffer(this.buffers[s.slot.buffer], s.slot.offset || 0, this.staging, s.at, s.size);
      }
    }
    device.queue.submit([enc.finish()]);
    if (!total) {
      if (reads.length) return spans.map(() => new ArrayBuffer(0));
      return [];
    }
    try {
      await this.staging.mapAsync(GPUMapMode.READ, 0, total);
    } catch (e) {
      throw new ProgramError(`reading back results failed: ${e.message}` +
        (this.lostInfo ? ` (device lost: ${this.lostInfo})` : ""));
    }
    const mapped = this.staging.getMappedRange(0, total);
    const out = spans.map((s) => mapped.slice(s.at, s.at + s.size));
    this.staging.unmap();
    return out;
  }

  /**
   * Diagnostics, not for training: one step with each kernel in its own submit, timed
   * on the host until the queue is idle. Resolves to [{kernel, ops, site, ms}] in order.
   * Inputs and scalars as for run(); state updates happen as in a real step.
   */
  async profile(inputs = {}, scalars = {}) {
    this._check();
    await this.queue;
    for (const n of Object.keys(this.program.inputs)) this.write("inputs", n, inputs[n]);
    this.writeScalars(scalars);
    await this.device.queue.onSubmittedWorkDone();
    const out = [];
    for (const s of this.steps) {
      const t = performance.now();
      const enc = this.device.createCommandEncoder();
      const pass = enc.beginComputePass();
      pass.setPipeline(s.pipeline);
      pass.setBindGroup(0, s.bindGroup);
      pass.dispatchWorkgroups(s.dispatch[0], s.dispatch[1] || 1, s.dispatch[2] || 1);
      pass.end();
      this.device.queue.submit([enc.finish()]);
      await this.device.queue.onSubmittedWorkDone();
      out.push({ kernel: s.kernel.name, ops: s.kernel.ops || [], site: s.kernel.site || "",
        dispatch: s.dispatch, ms: performance.now() - t });
    }
    return out;
  }

  /** Convenience: a read as the slot's typed array (Float32Array, Int32Array, Uint32Array). */
  async readTyped(kind, name) {
    const slot = this.slot(kind, name);
    return new ARRAYS[slot.dtype](await this.read(kind, name));
  }

  /** The GPUBuffer holding a param (for sharing with another instance). */
  paramBuffer(name) {
    return this.buffers[this.slot("params", name).buffer];
  }

  /** Wait for all submitted work. */
  async finish() {
    await this.queue;
    await this.device.queue.onSubmittedWorkDone();
  }

  destroy() {
    if (this.closed) return;
    this.closed = true;
    for (const b of this.owned) b.destroy();
    if (this.staging) this.staging.destroy();
  }
}
