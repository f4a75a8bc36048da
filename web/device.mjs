// device.mjs: a WebGPU device for tgweb's Programs. What a Program needs of a device (its
// limits and optional features) and why an adapter or a device cannot run it; asking the
// browser for an adapter and a device that has what is needed (or, for no Program in
// particular, the adapter's maxima and tgweb's optional features); the adapter's
// description, from which Python picks its kernels; and watching a device for its loss.
// The Program's parse and its error class live here too, since both this file and the run
// shim (gpu.mjs, which re-exports what pages use of this file) throw them:
//
//   const device = await requestDevice({ program });   // then gpu.mjs's instantiate(device, program)

// the limits compute work depends on; a device for no Program in particular gets the adapter's maxima
export const COMPUTE_LIMITS = ["maxBufferSize", "maxStorageBufferBindingSize", "maxStorageBuffersPerShaderStage",
  "maxComputeWorkgroupsPerDimension", "maxComputeInvocationsPerWorkgroup", "maxComputeWorkgroupSizeX",
  "maxComputeWorkgroupSizeY", "maxComputeWorkgroupSizeZ", "maxComputeWorkgroupStorageSize"];
// the spec's guaranteed defaults: a device is asked only for raises over them
const DEFAULTS = { maxBufferSize: 268435456, maxStorageBufferBindingSize: 134217728,
  maxStorageBuffersPerShaderStage: 8, maxComputeWorkgroupsPerDimension: 65535 };

/** An error from running a Program; `kernel`, `ops`, `site` say where when known. */
export class ProgramError extends Error {
  constructor(message, extra = {}) {
    super(message);
    this.name = "ProgramError";
    Object.assign(this, extra);
  }
}

export function parseProgram(program) {
  if (typeof program === "string") program = JSON.parse(program);
  const version = program && program.version;
  if (version !== 2) throw new ProgramError(`not a tgweb Program of version 2 (got version ${version})`);
  // one saved by an older tgweb: tgweb.program.Program.from_json(text).to_json() adds it
  if (!program.layout) throw new ProgramError("the Program has no layout: load and save it again with tgweb");
  return withTexts(program);
}

// each kernel's "wgsl" an index into the Program's "texts" (each distinct text once), made
// the text itself; a Program without "texts" (older) has the texts in place
function withTexts(program) {
  const texts = program.texts;
  if (!Array.isArray(texts) || !program.kernels.some((k) => typeof k.wgsl === "number")) return program;
  const kernels = program.kernels.map((k, i) => {
    if (typeof k.wgsl !== "number") return k;
    if (!Number.isInteger(k.wgsl) || !(k.wgsl >= 0 && k.wgsl < texts.length) || typeof texts[k.wgsl] !== "string") {
      throw new ProgramError(`kernel ${i}: wgsl ${k.wgsl} is not an index into the ${texts.length} texts`);
    }
    return { ...k, wgsl: texts[k.wgsl] };
  });
  return { ...program, kernels };
}

/** The device limits a Program needs: what the compiler stated (meta.limits), its largest buffer. */
export function programLimits(program) {
  program = parseProgram(program);
  const need = { ...(program.meta.limits || {}) };
  const biggest = Math.max(4, ...program.buffers.map((b) => b.size));
  for (const k of ["maxBufferSize", "maxStorageBufferBindingSize"]) need[k] = Math.max(need[k] || 0, biggest);
  need.maxStorageBuffersPerShaderStage = Math.max(need.maxStorageBuffersPerShaderStage || 0,
    ...program.kernels.map((k) => k.bindings.length));
  need.maxComputeWorkgroupsPerDimension = Math.max(1, ...program.kernels.flatMap((k) => k.dispatch));
  return need;
}

// why an adapter's or a device's (`what`) limits and features cannot run the Program, or
// null: the first limit it needs beyond them, or the features its kernels use they lack
export function refusal(program, need, { limits, features }, what) {
  for (const [name, value] of Object.entries(need)) {
    if (!(name in limits) || value <= limits[name]) continue;
    const b = program.buffers.reduce((a, x) => (x.size > a.size ? x : a));
    const culprit = name.endsWith("Size") && b.size === value ? ` (buffer ${b.id} "${b.label}", ${b.size} bytes)` : "";
    return `the Program needs ${name} = ${value}${culprit}, ${what} allows ${limits[name]}`;
  }
  const lack = (program.meta.features || []).filter((f) => !features.has(f));
  if (!lack.length) return null;
  const t = program.meta.target || {};
  return `the Program's kernels use the WebGPU feature(s) ${lack.join(", ")} (compiled for ` +
    `${t.description || t.vendor || "another adapter"}), which ${what} does not have; compile the ` +
    "function again for this device (its kernels then do without)";
}

/** Why this context has no WebGPU, or null (tgweb.mjs asks before it starts a worker). */
export function noWebGPU() {
  return typeof navigator !== "undefined" && navigator.gpu ? null : "WebGPU is not available here " +
    "(navigator.gpu is missing): use a browser with WebGPU enabled (Chrome/Edge 113+, Safari 26+, " +
    "Firefox 141+), on a page served over https or from http://localhost";
}

/** The adapter, or a ProgramError saying why there is none (the worker asks here too). */
export async function requestAdapter({ powerPreference } = {}) {
  if (noWebGPU()) throw new ProgramError(noWebGPU());
  const adapter = await navigator.gpu.requestAdapter(powerPreference ? { powerPreference } : {});
  if (adapter) return adapter;
  throw new ProgramError("WebGPU is present but no GPU adapter was found (navigator.gpu.requestAdapter() " +
    "returned null): the GPU may be blocklisted or disabled in this browser");
}

// device -> the sentence saying why it was lost, set from its `lost` promise (nothing
// else reports a loss): later calls fail with it, and onLost(sentence) hears it
const LOST = new WeakMap();

export function watchLoss(device, onLost) {
  if (LOST.has(device)) return;
  LOST.set(device, null);
  device.lost.then((info) => {
    LOST.set(device, `the GPU device was lost (${info.reason || "unknown"}: ${info.message || "no message"})`);
    if (onLost) onLost(LOST.get(device));
  });
}

// the optional features tgweb's kernels may use (a Program lists those it does in meta.features)
export const OPTIONAL_FEATURES = ["subgroups", "shader-f16", "chromium-experimental-subgroup-matrix"];

// a device for `adapter` (or a new one), asking for the limits and features `program` needs
// (naming the first the adapter lacks), or, for any Program, the adapter's maxima and features
export async function requestDevice({ program, adapter, powerPreference, onLost, onError } = {}) {
  adapter = adapter || await requestAdapter({ powerPreference });
  program = program && parseProgram(program);
  const need = program ? programLimits(program) : {};
  const why = program && refusal(program, need, adapter, "this adapter");
  if (why) throw new ProgramError(why);
  const requiredLimits = {};
  for (const name of program ? Object.keys(need) : COMPUTE_LIMITS) {
    const value = program ? need[name] : adapter.limits[name];
    if (name in adapter.limits && !(value <= (DEFAULTS[name] || 0))) requiredLimits[name] = value;
  }
  const has = OPTIONAL_FEATURES.filter((f) => adapter.features.has(f));
  const requiredFeatures = program ? [...(program.meta.features || [])] : has;
  const device = await adapter.requestDevice({ requiredLimits, requiredFeatures });
  watchLoss(device, onLost);
  if (onError) device.addEventListener("uncapturederror", (e) => onError(e.error));
  return device;
}

/** The adapter's description, for display and tgweb's choice of kernels (with `features`). */
export function adapterInfo(adapter) {
  const i = adapter.info || {};
  const out = { vendor: i.vendor || "", architecture: i.architecture || "", description: i.description || "",
    device: i.device || "", isFallbackAdapter: i.isFallbackAdapter === true,
    features: OPTIONAL_FEATURES.filter((f) => adapter.features.has(f)) };
  for (const k of ["subgroupMinSize", "subgroupMaxSize"]) if (i[k] > 0) out[k] = i[k];
  // the subgroup-matrix configurations (GPUSubgroupMatrixConfig objects, copied to plain
  // data); tgweb.codegen.target.matrix_configs leaves out whatever is malformed
  if (out.features.includes("chromium-experimental-subgroup-matrix")) {
    out.subgroupMatrixConfigs = [...(i.subgroupMatrixConfigs || [])].map((c) => ({
      componentType: c.componentType, resultComponentType: c.resultComponentType, M: c.M, N: c.N, K: c.K }));
  }
  return out;
}

/** Why the device was lost (the sentence its `lost` promise gave), or null while it is not. */
export const lostReason = (device) => LOST.get(device) || null;
