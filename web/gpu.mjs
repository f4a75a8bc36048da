// gpu.mjs: executes a tgweb Program on a WebGPU device, and nothing more.
//
// A Program (tgweb/program.py) is plain JSON, validated and laid out where Python makes
// or loads it: buffers, kernels (WGSL, bindings, dispatch), named slots, per-step scalars,
// and where a step's host data and the kernels' offsets go. This module checks only what
// the device can refuse (limits, features, WGSL) and the host data handed to run() and
// write(), allocates the buffers, creates one pipeline per distinct WGSL text and every
// bind group once, and runs a step as one compute pass and one submit, reading back only
// the slots asked for. Getting a device that can run the Program is device.mjs's work; this
// module re-exports it, so a saved Program runs with these two files alone:
//
//   const device = await requestDevice({ program });
//   const rt = await instantiate(device, program);
//   rt.write("params", "l1.weight", new Float32Array([...]));
//   const [loss] = await rt.run({ x, y }, { lr: 1e-3 }, [["outputs", "loss"]]);  // ArrayBuffers

import { lostReason, parseProgram, ProgramError, programLimits, refusal, watchLoss } from "./device.mjs";
// the device's side, for pages that import this file alone
export {
  adapterInfo, COMPUTE_LIMITS, noWebGPU, OPTIONAL_FEATURES, parseProgram, ProgramError, programLimits,
  requestAdapter, requestDevice,
} from "./device.mjs";

const KINDS = ["inputs", "params", "states", "outputs", "captures"];
const WRITABLE = ["inputs", "params", "states"];
const ARRAYS = { f32: Float32Array, i32: Int32Array, bool: Uint32Array };
const USAGE = () => GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;

const slotBytes = (slot) => 4 * slot.shape.reduce((a, d) => a * d, 1);

function toBytes(data, what, dtype = "f32") {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (Array.isArray(data)) return new Uint8Array(new ARRAYS[dtype](data).buffer); // plain numbers: the slot's type
  throw new ProgramError(`${what}: expected an ArrayBuffer, a typed array or an array of numbers`);
}

// the pipeline of kernels sharing a WGSL text; a failure names them, their ops and site.
// times: {kernel, chars, asked}, to which it adds when the text was checked (the browser
// parses the texts one after another) and when the pipeline was made (performance.now(), ms)
async function createPipeline(device, kernels, layout, times) {
  const k = kernels[0], wgsl = k.wgsl, ops = [...new Set(kernels.flatMap((x) => x.ops || []))];
  const more = kernels.length > 1 ? ` (and ${kernels.length - 1} more kernel(s) with the same WGSL)` : "";
  const text = `kernel ${k.name}${more}, ops [${ops.join(", ")}]` + (k.site ? `, at ${k.site}` : "");
  const extra = { kernel: k.name, ops, site: k.site || "" };
  // every pipeline is asked for before any answer is awaited (the driver compiles them in
  // parallel), and the error scope is popped at once: scopes nest across awaits
  device.pushErrorScope("validation");
  const module = device.createShaderModule({ code: wgsl, label: k.name });
  const scope = device.popErrorScope();
  const pipeline = device.createComputePipelineAsync({ label: k.name, layout, compute: { module, entryPoint: "main" } });
  pipeline.catch(() => {}); // a module error below says more
  const [info, moduleError] = await Promise.all([
    module.getCompilationInfo ? module.getCompilationInfo() : { messages: [] }, scope]);
  times.checked = performance.now();
  const messages = info.messages.filter((m) => m.type === "error").map((m) => (m.lineNum > 0
    ? `  line ${m.lineNum}:${m.linePos}: ${m.message}\n    ${(wgsl.split("\n")[m.lineNum - 1] || "").trim()}`
    : `  error: ${m.message}`));
  if (moduleError || messages.length) {
    throw new ProgramError(`WGSL compile failed in ${text}\n` +
      (messages.length ? messages.join("\n") : `  ${moduleError.message}`), { ...extra, compiler: messages });
  }
  try {
    const made = await pipeline;
    times.made = performance.now();
    return made;
  } catch (e) {
    throw new ProgramError(`WebGPU pipeline creation failed in ${text}\n  ${e.message}`, extra);
  }
}

// A pipeline is one per WGSL text and binding accesses; its bind group layout follows them.
const pipelineKey = (k) => k.bindings.map((b) => (b.access === "read" ? "r" : "w")).join("") + "\n" + k.wgsl;

function kernelGroups(kernels) {
  const groups = new Map();
  for (const k of kernels) groups.set(pipelineKey(k), [...(groups.get(pipelineKey(k)) || []), k]);
  return groups;
}

function bindLayout(device, k) {
  const entries = k.bindings.map((b, i) => ({ binding: i, visibility: GPUShaderStage.COMPUTE,
    buffer: { type: b.access === "read" ? "read-only-storage" : "storage" } }));
  if (k.offsets.length) entries.push({ binding: entries.length, visibility: GPUShaderStage.COMPUTE, buffer: { type: "uniform" } });
  return device.createBindGroupLayout({ entries });
}

// the bind group layout of kernels ks (one group) and their pipeline: a promise that
// createPipeline rejects naming the kernel and why
function makePipeline(device, ks) {
  const layout = bindLayout(device, ks[0]);
  const times = { kernel: ks[0].name, chars: ks[0].wgsl.length, asked: performance.now() };
  const pipeline = createPipeline(device, ks, device.createPipelineLayout({ bindGroupLayouts: [layout] }), times);
  return { layout, pipeline, times };
}

// The pipelines asked for on each device: device -> pipelineKey -> {layout, pipeline, times,
// users}. One that prewarm asked for waits here for the instantiates that take it; one that
// Runtimes use serves every other Program with the same kernel (a trainer's step and the
// programs attached to it share many), until the last of them is destroyed. One that fails
// is dropped: whoever needs it makes it again, and throws why.
const made = new WeakMap();

function pipelinesOf(device) {
  let mine = made.get(device);
  if (!mine) made.set(device, (mine = new Map()));
  return mine;
}

function keep(mine, key, entry) {
  Object.assign(entry, { key, users: 0 });
  mine.set(key, entry);
  entry.pipeline.catch(() => mine.get(key) === entry && mine.delete(key));
  return entry;
}

// a Runtime is done with these entries: those no other uses go
function release(device, entries) {
  const mine = pipelinesOf(device);
  for (const entry of entries) if (--entry.users <= 0 && mine.get(entry.key) === entry) mine.delete(entry.key);
}

/** Ask the device for the pipelines of program's kernels now, so that an instantiate of a
 *  Program with the same kernels later finds them made (the worker does this for the Programs
 *  of the last visit, while Python starts). program: a Program (its JSON text or object), or
 *  an array of kernels as a Program has them (with their texts): those a compile has emitted
 *  so far (tgweb.lower's `ask`). Nothing here reports an error: a kernel that fails is made
 *  again by instantiate, which throws why. Returns how many pipelines were asked for. */
export function prewarm(device, program) {
  if (typeof program === "string") program = JSON.parse(program);
  const kernels = Array.isArray(program) ? program : parseProgram(program).kernels;
  const mine = pipelinesOf(device);
  let n = 0;
  for (const [key, ks] of kernelGroups(kernels)) {
    if (mine.has(key)) continue;
    keep(mine, key, makePipeline(device, ks));
    n += 1;
  }
  return n;
}

// what another instance may lend a Program: a param, or a module buffer kept as a state
const sharable = (program, name) => program.params[name] || program.states[name];

// the Program's buffers (a shared param brings its whole buffer) and every kernel's
// offsets in one uniform buffer, in the slices of the Program's layout
function allocate(device, program, shared) {
  const buffers = new Array(program.buffers.length);
  const owned = [];
  for (const [name, buf] of Object.entries(shared)) buffers[sharable(program, name).buffer] = buf;
  for (const b of program.buffers) {
    if (buffers[b.id]) continue;
    buffers[b.id] = device.createBuffer({ size: b.size, usage: USAGE(), label: b.label || `${b.kind}#${b.id}` });
    owned.push(buffers[b.id]);
  }
  // data constants (little-endian words, base64 in the Program): written once, here
  for (const [name, slot] of Object.entries(program.constants || {})) {
    const bytes = Uint8Array.from(atob(program.data[name]), (c) => c.charCodeAt(0));
    device.queue.writeBuffer(buffers[slot.buffer], slot.offset, bytes);
  }
  const { uniform: slices, uniform_bytes: size } = program.layout;
  const uniform = device.createBuffer({ size, label: "offsets", usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  owned.push(uniform);
  const words = new Uint32Array(size / 4);
  program.kernels.forEach((k, i) => words.set(k.offsets, slices[i][0] / 4));
  device.queue.writeBuffer(uniform, 0, words);
  return { buffers, owned, uniform, slices };
}

// a Program on a device: its buffers, one pipeline per WGSL text and binding accesses (made
// concurrently), its bind groups; `shared`: param name -> a GPUBuffer of another instance
export async function instantiate(device, program, { shared = {} } = {}) {
  program = parseProgram(program);
  watchLoss(device);
  const t0 = performance.now();
  const why = refusal(program, programLimits(program), device, "the device");
  if (why) throw new ProgramError(why);
  const unknown = Object.keys(shared).filter((name) => !sharable(program, name));
  if (unknown.length) throw new ProgramError(`shared: the Program has no param or state ${unknown.join(", ")}`);
  device.pushErrorScope("out-of-memory");
  const { buffers, owned, uniform, slices } = allocate(device, program, shared);
  const allocError = await device.popErrorScope();
  const taken = []; // the pipelines this instance uses (entries of pipelinesOf(device))
  try {
    if (allocError) throw new ProgramError(`allocating the Program's buffers failed: ${allocError.message}`);
    const groups = kernelGroups(program.kernels), mine = pipelinesOf(device);
    const layouts = new Map(), pipelines = new Map(), times = [];
    const t1 = performance.now();
    let prewarmed = 0;
    await Promise.all([...groups].map(async ([key, ks]) => {
      let entry = mine.get(key);
      if (entry) {
        try {
          await entry.pipeline;
          prewarmed += 1;
        } catch {
          entry = null; // made again below, for its error
        }
      }
      entry = entry || keep(mine, key, makePipeline(device, ks));
      entry.users += 1;
      taken.push(entry);
      times.push(entry.times);
      layouts.set(key, entry.layout);
      pipelines.set(key, await entry.pipeline);
    }));
    const pipelinesMs = performance.now() - t1;
    device.pushErrorScope("validation");
    const steps = program.kernels.map((k, i) => {
      const entries = k.bindings.map((b, j) => ({ binding: j, resource: { buffer: buffers[b.buffer] } }));
      const [offset, size] = slices[i];
      if (k.offsets.length) entries.push({ binding: k.bindings.length, resource: { buffer: uniform, offset, size } });
      const bindGroup = device.createBindGroup({ layout: layouts.get(pipelineKey(k)), label: k.name, entries });
      return { kernel: k, pipeline: pipelines.get(pipelineKey(k)), bindGroup, dispatch: k.dispatch };
    });
    const bindError = await device.popErrorScope();
    if (bindError) throw new ProgramError(`creating bind groups failed: ${bindError.message}`);
    const rt = new Runtime(device, program, buffers, owned, steps, performance.now() - t0, groups.size);
    rt.pipelineEntries = taken;
    rt.pipelinesMs = pipelinesMs;
    rt.prewarmed = prewarmed; // of rt.pipelineCount, how many were asked for before (prewarm, another instance)
    // each pipeline's {kernel, chars, asked, checked, made} (ms, this thread's clock): when it
    // was asked for (by prewarm, another instance or here), its text checked, it made
    // (tools/pipeline_times.py)
    rt.pipelineTimes = times;
    return rt;
  } catch (e) {
    owned.forEach((b) => b.destroy()); // a failed instance leaves nothing allocated
    release(device, taken);
    throw e;
  }
}

export class Runtime {
  constructor(device, program, buffers, owned, steps, setupMs, pipelineCount) {
    Object.assign(this, { device, program, buffers, owned, steps, setupMs, pipelineCount, closed: false });
    this.spare = []; // staging buffers not being mapped: a step is submitted while the last maps
    // a packed step's writes: each input's bytes, then the scalar words, where the layout has them
    const { inputs, scalars } = program.layout, n = program.scalars.length;
    this.writes = inputs.map(([name, at, size]) => ({ buffer: buffers[program.inputs[name].buffer],
      offset: program.inputs[name].offset, at, size }));
    if (n) this.writes.push({ buffer: buffers[program.scalars_buffer], offset: 0, at: scalars, size: 4 * n });
  }

  slot(kind, name) {
    const slot = KINDS.includes(kind) && this.program[kind][name];
    if (slot) return slot;
    const known = Object.keys(this.program[kind] || {}).join(", ") || "none";
    throw new ProgramError(`the Program has no ${kind.slice(0, -1)} "${name}"; it has: ${known}`);
  }

  _check() {
    if (this.closed) throw new ProgramError("this Program instance was destroyed");
    const lost = lostReason(this.device);
    if (lost) throw new ProgramError(lost, { lost: true });
  }

  // host data for a slot as bytes of exactly its size (a wrong size would write past it)
  _bytes(kind, name, data) {
    const slot = this.slot(kind, name), bytes = toBytes(data, `${kind} "${name}"`, slot.dtype);
    if (bytes.byteLength === slotBytes(slot)) return [slot, bytes];
    throw new ProgramError(`${kind.slice(0, -1)} "${name}": expected ${slotBytes(slot) / 4} values ` +
      `(shape [${slot.shape}]), got ${bytes.byteLength / 4}`);
  }

  /** Overwrite a param, state or input with bytes (typed array or ArrayBuffer). */
  write(kind, name, data) {
    this._check();
    if (!WRITABLE.includes(kind)) throw new ProgramError(`cannot write ${kind}; writable: ${WRITABLE.join(", ")}`);
    const [slot, bytes] = this._bytes(kind, name, data);
    this.device.queue.writeBuffer(this.buffers[slot.buffer], slot.offset, bytes);
  }

  /** Read a slot back: resolves to an ArrayBuffer of its bytes. */
  async read(kind, name) {
    return (await this.readMany([[kind, name]]))[0];
  }

  /** Read several slots in one submit and one map: [[kind, name], ...] -> [ArrayBuffer, ...]. */
  async readMany(reads) {
    return this._submit(false, this.readPlan(reads), false);
  }

  /** One step: every kernel in one pass, one submit; resolves to the slots `reads` names, as ArrayBuffers. */
  async run(inputs = {}, scalars = {}, reads = []) {
    this._check();
    const plan = this.readPlan(reads), data = this.pack(inputs, scalars);
    return this.runPacked(data, plan, false);
  }

  /** A step's host data as program.layout lays it out: each input checked (a bad one changes nothing). */
  pack(inputs = {}, scalars = {}) {
    const given = Object.keys(inputs || {}), unknown = given.filter((n) => !(n in this.program.inputs));
    const missing = Object.keys(this.program.inputs).filter((n) => !given.includes(n));
    if (missing.length || unknown.length) {
      throw new ProgramError(`inputs: missing ${missing.join(", ") || "none"}; unknown ${unknown.join(", ") || "none"}`);
    }
    const { layout, scalars: list } = this.program, data = new Uint8Array(layout.bytes);
    for (const [n, at] of layout.inputs) data.set(this._bytes("inputs", n, inputs[n])[1], at);
    const lack = list.filter((s) => !(s.name in (scalars || {}))).map((s) => s.name);
    if (lack.length) throw new ProgramError(`scalars missing: ${lack.join(", ")}`);
    const words = new DataView(data.buffer, layout.scalars); // an f32 rounded, a u32 taken modulo 2**32
    list.forEach((s, i) => words[s.type === "f32" ? "setFloat32" : "setUint32"](4 * i, scalars[s.name], true));
    return data;
  }

  /** Write a packed step's inputs and scalars (from pack, or tgweb's browser backend) without running it. */
  writePacked(data) {
    if (data.byteLength !== this.program.layout.bytes) throw new ProgramError("a packed step of the wrong size");
    for (const w of this.writes) this.device.queue.writeBuffer(w.buffer, w.offset, data, w.at, w.size);
  }

  /** Which slots a run reads back ([[kind, name], ...]), checked once: for runPacked. */
  readPlan(reads) {
    let total = 0;
    const spans = [...reads].map(([kind, name]) => {
      const slot = this.slot(kind, name), size = slotBytes(slot);
      return { buffer: this.buffers[slot.buffer], offset: slot.offset, at: (total += size) - size, size };
    });
    return { spans, total };
  }

  /**
   * run() for a caller that checks and packs a step itself (tgweb's browser backend: one
   * crossing from Pyodide a step): `data` as pack() makes it, `plan` from readPlan().
   * Resolves to one ArrayBuffer of the slots read, back to back. A step that cannot be
   * sent throws at once: one that reads nothing need not be awaited.
   */
  runPacked(data, plan, whole = true) {
    this._check();
    this.writePacked(data);
    return this._submit(true, plan, whole);
  }

  // encode and submit now, in call order; the promise resolves once the reads are mapped,
  // to one ArrayBuffer (whole) or one per slot read
  _submit(dispatch, plan, whole) {
    this._check();
    const device = this.device;
    const enc = device.createCommandEncoder();
    if (dispatch && this.steps.length) {
      const pass = enc.beginComputePass();
      let last = null;
      for (const s of this.steps) {
        if (s.pipeline !== last) pass.setPipeline((last = s.pipeline));
        pass.setBindGroup(0, s.bindGroup);
        const d = s.dispatch;
        pass.dispatchWorkgroups(d[0], d[1], d[2]);
      }
      pass.end();
    }
    const { spans, total } = plan;
    let staging = null;
    if (total) {
      const k = this.spare.findIndex((b) => b.size >= total);
      staging = k >= 0 ? this.spare.splice(k, 1)[0] : device.createBuffer({ size: Math.max(total, 256),
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST, label: "tgweb readback" });
      for (const s of spans) enc.copyBufferToBuffer(s.buffer, s.offset, staging, s.at, s.size);
    }
    device.queue.submit([enc.finish()]);
    if (!total) return Promise.resolve(whole ? new ArrayBuffer(0) : spans.map(() => new ArrayBuffer(0)));
    const mapped = this._map(staging, spans, total, whole);
    mapped.catch(() => {}); // awaited later (a pipelined step): not an unhandled rejection meanwhile
    return mapped;
  }

  async _map(staging, spans, total, whole) {
    try {
      await staging.mapAsync(GPUMapMode.READ, 0, total);
    } catch (e) {
      staging.destroy();
      await Promise.race([this.device.lost, new Promise((r) => setTimeout(r, 50))]); // a loss says why
      const lost = lostReason(this.device);
      const why = lost ? `${lost}; reading back results failed` : `reading back results failed: ${e.message}`;
      throw new ProgramError(why, { lost: !!lost });
    }
    const mapped = staging.getMappedRange(0, total);
    const out = whole ? mapped.slice(0, total) : spans.map((s) => mapped.slice(s.at, s.at + s.size));
    staging.unmap();
    if (this.closed) staging.destroy();
    else this.spare.push(staging);
    return out;
  }

  /** The GPUBuffer holding a param (for sharing with another instance). */
  paramBuffer(name) {
    return this.buffers[this.slot(this.program.params[name] ? "params" : "states", name).buffer];
  }

  destroy() {
    if (this.closed) return;
    this.closed = true;
    for (const b of this.owned) b.destroy();
    for (const b of this.spare) b.destroy();
    release(this.device, this.pipelineEntries || []);
  }
}
