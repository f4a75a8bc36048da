// worker.mjs: the tgweb module worker. It loads Pyodide and the tgweb wheel from
// the bundled site, owns the WebGPU device, and runs Python sent by the page.
//
// Protocol (web/tgweb.mjs speaks it; any page may):
//   page -> worker
//     {type: "init", interruptBuffer?: SharedArrayBuffer(Int32Array[1]), interrupt?: bool,
//      powerPreference?, files?}           the page sets interruptBuffer[0] = 2 to stop;
//                                           files: serve Pyodide and the wheels from these
//                                           (a classic worker; see serveFiles)
//     {type: "run", id, source, filename?, globals?}
//                                           run Python (top-level await allowed); globals:
//                                           name -> JSON value or typed array, set first
//     {type: "stop"}                        ask the running script to stop
//   worker -> page
//     {type: "ready", info}                 Pyodide, tgweb and the GPU device are ready
//     {type: "result", id, value}           JSON value of the source's last expression
//     {type: "error", id, error}            error: {name, message, pyType, traceback, line, ...};
//                                           id null: fatal (startup failed, device lost)
//     {type: "event", event, data}          from Python (tgweb.worker.emit/progress/metric/log)
//                                           and print() output as "log" events; from
//                                           tgweb.worker.emit_bytes, data.bytes is a Uint8Array;
//                                           while starting, "startup" events ({text, at}: the
//                                           phase, since at, epoch ms); while a Program is set up,
//                                           "phase" events ({text, at}: compiling kernels, ...);
//                                           "snapshot" ({size, ms} or {error}): the Pyodide
//                                           snapshot a later visit restores is kept
// Runs are executed one after another, in the order received.

import * as bulk from "./bulk.mjs";
import { adapterInfo, COMPUTE_LIMITS, lostReason, requestAdapter, requestDevice } from "./device.mjs";
import * as gpu from "./gpu.mjs"; // Python's browser backend instantiates Programs through it
import { bootPython, bundledSnapshot, entryProgram, makeSnapshot, markBoot, openProgramCache, readSnapshotAhead, snapshotKey, snapshotTimes } from "./progcache.mjs";
import { asmModule, fetchAhead, fetchBytes, FILES_BASE, pyodideLoader, serveFiles, watchWasm } from "./pyodidefiles.mjs";
import { WITH_READER } from "./snapread.mjs";
import { versioned } from "./versioned.mjs";

const post = (m) => self.postMessage(m);
const timings = {};
const t0 = performance.now();
let pyodide = null;
let device = null;
let adapter = null;
let stopRequested = false;
let interrupt = null;
let ns = null; // the persistent namespace user sources run in
let toJson = null;
let queue = Promise.resolve();
let ready = null;
let fatal = null;
let hooks = null; // what Python sees as the module tgweb_js
// resolves once Python reports its first metric (a trainer's first loss exists)
let lossCame = null;
const firstLoss = new Promise((ok) => { lossCame = ok; });
let deviceReady = null; // after a loss: the promise of the replacement device
let dataBase = null; // where the samples' data files are (tgweb.worker.fetch_data)
let siteManifest = Promise.resolve(null); // the site's manifest.json, as soon as it is asked for
let siteBase = null; // the URL of the site's folder
// the Pyodide memory snapshot, when this visit has none to restore: made by a worker of its
// own (this script, named SNAPSHOT_WORKER) once the first loss exists or the worker idles
const SNAPSHOT_WORKER = "tgweb-snapshot";
const IDLE_MS = 1500;
let snapshot = null; // {key, wheel, files, module}: what that worker needs, or {key, bytes}: the site's; null once started
let runsPending = 0;
let idleTimer = null;

function mark(name, since) {
  timings[name] = Math.round(performance.now() - since);
}

// the page's progress line while starting; what comes before the page's init message
// waits for it (the page may not be listening yet)
let heard = false;
const unheard = [];
function startup(text) {
  const data = { text, at: performance.timeOrigin + performance.now() };
  if (heard) post({ type: "event", event: "startup", data });
  else unheard.push(data);
}

// what a Program's set-up waits for, for the page's status line
function phase(text) {
  post({ type: "event", event: "phase", data: { text, at: performance.timeOrigin + performance.now() } });
}

// gpu.mjs as Python sees it, its instantiate announced: creating the pipelines (compiling
// the kernels) is the longest wait of a first Start
const announcedGpu = {
  ...gpu,
  instantiate: async (...args) => {
    phase("compiling kernels (GPU pipelines)");
    try {
      return await gpu.instantiate(...args);
    } finally {
      phase("setting up (initial values, upload)");
    }
  },
};

function serializeError(e, filename) {
  const out = { name: e && e.name ? e.name : "Error", message: String(e && e.message ? e.message : e) };
  if (e && e.constructor && e.constructor.name === "PythonError" || (e && typeof e.type === "string" && /Traceback/.test(out.message))) {
    out.name = "PythonError";
    out.pyType = e.type;
    const tb = cleanTraceback(out.message);
    out.traceback = tb;
    out.message = tb;
    // the last frame in the user's file gives the line
    const re = new RegExp(`File "${escapeRe(filename || "")}", line (\\d+)`, "g");
    let m, line = null;
    while ((m = re.exec(tb))) line = Number(m[1]);
    if (line != null) out.line = line;
  }
  for (const k of ["kernel", "ops", "site", "compiler"]) if (e && e[k] !== undefined) out[k] = e[k];
  return out;
}

function escapeRe(s) {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

// Pyodide's own frames (eval_code_async and the like) say nothing to the user, nor do
// runFile's two (its caller's and tgweb.worker.run_file)
const RUN_FILE_NAME = "<tgweb run_file>";
function cleanTraceback(tb) {
  const lines = tb.replace(/\s+$/, "").split("\n");
  const out = [];
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i];
    if (/^ {2}File "\/lib\/python[^"]*\/_pyodide\//.test(l) || l.startsWith(`  File "${RUN_FILE_NAME}"`) ||
        /^ {2}File "[^"]*\/tgweb\/worker\.py", line \d+, in run_file$/.test(l)) {
      while (i + 1 < lines.length && /^ {4}/.test(lines[i + 1])) i++;
      continue;
    }
    out.push(l);
  }
  return out.join("\n");
}

// The device: the one asked for as the served worker started (earlyGpu), when the page
// wants what it was asked with (no powerPreference) and it was not lost since, else a new one.
async function setupGpu(options) {
  const s = performance.now();
  const early = earlyGpu && await earlyGpu.catch(() => null);
  let made = early && !options.powerPreference && !lostReason(early.device) ? early : null;
  if (early && !made) early.device.destroy(); // not taken: its loss is nobody's (onLost below)
  made = made || await newDevice(options);
  ({ adapter, device } = made);
  mark("gpu", s);
}

// What of an adapter the Programs a site ships for it were planned for (tools/adapters.json:
// the worker's adapterInfo less its name and device id, and the device's limits): equal, the
// keys Python computes are those the site lists (Python checks each entry all the same).
const PLANNED_FOR = ["vendor", "architecture", "isFallbackAdapter", "features", "subgroupMinSize",
  "subgroupMaxSize", "subgroupMatrixConfigs"];

function plannedFor(listed, info, limits) {
  return PLANNED_FOR.every((k) => JSON.stringify(listed.info[k]) === JSON.stringify(info[k])) &&
    Object.entries(listed.limits).every(([name, value]) => limits[name] === value);
}

// Tell the cache where the site's shipped Programs are, and which (the manifest's list).
function shipsFrom(manifest, cache) {
  const p = manifest && manifest.programs;
  if (cache && p && typeof p.dir === "string" && Array.isArray(p.keys)) cache.ships(new URL(p.dir, siteBase), p.keys);
}

// The shipped Programs of `labels` on this adapter that the origin's cache lacks (a repeat
// visit's come from it), fetched now, each one's pipelines asked for as it comes, before its
// text answers Python's ask. Resolves, once they are asked of the site, to how many.
async function warmShipped(manifest, cache, labels) {
  const listed = manifest && manifest.programs && manifest.programs.adapters;
  if (!cache || !Array.isArray(listed) || !Array.isArray(labels) || !labels.length) return 0;
  const mine = listed.find((a) => plannedFor(a, adapterInfo(adapter), device.limits));
  if (!mine) return 0;
  const have = new Set((await cache.list()).map((e) => e.key));
  const keys = labels.flatMap((l) => mine.labels[l] || []).filter((k) => !have.has(k));
  return cache.fetchShipped(keys, (text) => {
    try {
      timings.shipped_prewarmed = (timings.shipped_prewarmed || 0) + gpu.prewarm(device, entryProgram(text));
    } catch { /* not an entry: Python refuses it and compiles */ }
  });
}

// A device with the adapter's maxima of the compute limits, so that every Program this
// adapter can run fits (gpu.instantiate checks each Program against them). The adapter
// is asked for afresh: one that has made a device may not make another. Resolves to
// {adapter, device}; the loss of the device in use is reported and it is replaced.
async function newDevice(options) {
  const a = await requestAdapter(options); // says why when there is no WebGPU or no adapter
  const d = await requestDevice({
    adapter: a,
    onLost: (why) => {
      if (d === device) replaceDevice(why, options);
    },
    onError: (err) => post({ type: "event", event: "log", data: { stream: "gpu", level: "error", text: err.message } }),
  });
  return { adapter: a, device: d };
}

// A lost device is reported to the page (in device.mjs's words, as every later call on it
// fails), and replaced: trainers made with recover_every continue on the new one from
// their last host copy; other work fails naming the loss.
function replaceDevice(message, options) {
  post({ type: "event", event: "error", data: { name: "DeviceLost", message, fatal: false } });
  deviceReady = newDevice(options).then((made) => {
    ({ adapter, device } = made);
    if (hooks) hooks.device = device;
    post({ type: "event", event: "log", data: { stream: "gpu", text: "a new GPU device is ready" } });
    return device;
  }, (e) => {
    fatal = `${message}; no new device could be made: ${e.message}`;
    post({ type: "error", id: null, error: { name: "DeviceLost", message: fatal, fatal: true } });
    throw e;
  });
}

// the site's folder: this script's, or where serveFiles serves the page's bundle from
const siteFolder = (files) => new URL(files ? FILES_BASE : new URL("./", import.meta.url));
const keepSmallModules = (figures) => { timings.small_modules = figures; };

async function setupPython(files, cache) {
  const s = performance.now();
  startup("downloading Pyodide");
  if (files) serveFiles(files);
  const base = siteFolder(files);
  const compiled = files ? null : fetchAhead(base);
  if (compiled) compiled.then(() => mark("wasm", s), () => {}); // failed: Pyodide fetches and compiles it itself
  if (!files) {
    // Pyodide's module script, imported now rather than once pyodide.mjs and the lock file
    // are in: loadPyodide gets it (servedPyodide) loaded
    asmModule(base).then(() => markBoot("asm"), () => {}); // loadPyodide reports it
    // the kept snapshot's file, read while those come (a page opened from disk keeps it in
    // IndexedDB), by the reader the page started where it did
    readSnapshotAhead(pageReader);
  }
  dataBase = new URL("data/", base);
  // the manifest and then the tgweb wheel load while Pyodide's module loads and boots
  const manifestReady = fetch(versioned("manifest.json", base)).then((r) => r.json());
  siteManifest = manifestReady;
  siteBase = base;
  const wheelReady = manifestReady.then((m) => fetchBytes(new URL(m.wheel, base)));
  wheelReady.catch(() => {}); // reported where it is awaited
  const { loadPyodide, indexURL } = await pyodideLoader(files, base, keepSmallModules);
  markBoot("loader");
  // how long Pyodide's wasm takes to arrive and compile (streamed in, by fetchAhead or by loadPyodide)
  const module = watchWasm(compiled, {
    compiling: () => startup("compiling Pyodide (WebAssembly, as it arrives)"),
    instance: () => markBoot("instance"),
    done: () => {
      if (!timings.wasm) mark("wasm", s); // compiled by loadPyodide, not by fetchAhead
      startup("starting Python");
    },
  });
  const manifest = await manifestReady;
  markBoot("manifest");
  const key = await snapshotKey(manifest);
  markBoot("key");
  // restored from the memory snapshot after importing tgweb: the site's own (fetched now, while
  // Pyodide's wasm arrives), else the one a visit left; a worker on file:// (origin "null")
  // can start no worker of its own: it makes the snapshot now
  const boot = await bootPython(loadPyodide, { indexURL, wheel: wheelReady, cache: await cache, key,
    bundled: files ? null : bundledSnapshot(manifest, key, base, fetchBytes), now: self.origin === "null" });
  pyodide = boot.pyodide;
  timings.snapshot = boot.snapshot;
  if (boot.read) timings.snapshot_read = boot.read; // where its bytes came from: "worker" (snapread.mjs), "here", "indexeddb", "site"
  timings.snapshot_ms = snapshotTimes(performance.timeOrigin + t0); // its read and restore, since the worker started
  if (boot.later) {
    snapshot = { key, wheel: (await wheelReady).slice(), files, module: await module };
  } else if (boot.keep) { // the site's snapshot: kept in the cache as it is, for the next visit
    snapshot = { key, bytes: boot.keep };
  }
  pyodide.setStdout({ batched: (text) => post({ type: "event", event: "log", data: { stream: "stdout", text } }) });
  pyodide.setStderr({ batched: (text) => post({ type: "event", event: "log", data: { stream: "stderr", text } }) });
  mark("pyodide", s); // booted or restored, with the tgweb wheel installed and imported
  return manifest;
}

// The snapshot, after the first step: the first "metric" event (the first loss exists), or
// when no run has been in flight for IDLE_MS. Its worker boots a Pyodide of its own from the
// module this one compiled (and the HTTP cache): a thread apart from the training's.
function snapshotWhenIdle() {
  clearTimeout(idleTimer);
  if (snapshot && runsPending === 0) idleTimer = setTimeout(startSnapshot, IDLE_MS);
}

function startSnapshot() {
  clearTimeout(idleTimer);
  if (!snapshot) return;
  const job = snapshot;
  snapshot = null;
  if (job.bytes) { // the site's, restored from: its bytes go into the cache as they are
    const t = performance.now();
    openProgramCache().then((cache) => cache.putSnapshot(job.key, job.bytes)).then(
      () => post({ type: "event", event: "snapshot", data: { size: job.bytes.byteLength, ms: Math.round(performance.now() - t), from: "site" } }),
      (e) => post({ type: "event", event: "snapshot", data: { error: String(e && e.message || e) } }));
    return;
  }
  timings.snapshot = "making";
  const done = (data) => {
    timings.snapshot = data.error ? `failed: ${data.error}` : "made";
    post({ type: "event", event: "snapshot", data });
    if (w) w.terminate();
  };
  let w;
  try { // this very script: served, worker.mjs (or the Blob that imports it); else worker.js
    w = new Worker(self.location.href, { type: job.files ? "classic" : "module", name: SNAPSHOT_WORKER });
  } catch (e) {
    done({ error: e.message });
    return;
  }
  w.onmessage = (ev) => { if (ev.data && ev.data.type === "snapshot") done(ev.data.result); };
  w.onerror = (ev) => { ev.preventDefault(); done({ error: ev.message || "the snapshot's worker failed" }); };
  w.postMessage({ type: "snapshot", ...job }, [job.wheel.buffer]);
}

// in the snapshot's worker: make it and keep it in the Program cache's database
async function snapshotJob(m) {
  if (m.module) { // the visit's compiled module: instantiated again, not compiled again
    WebAssembly.instantiateStreaming = async (_response, imports) =>
      ({ module: m.module, instance: await WebAssembly.instantiate(m.module, imports) });
  }
  if (m.files) serveFiles(m.files);
  const { loadPyodide, indexURL } = await pyodideLoader(m.files, siteFolder(m.files), keepSmallModules);
  return makeSnapshot(loadPyodide, { indexURL, wheel: m.wheel, cache: await openProgramCache(), key: m.key });
}

function startPython(files) {
  const cache = openProgramCache().catch(() => null); // none: compiles are not cached
  return { cache, python: setupPython(files, cache) };
}

// Served (a module worker), neither Python nor the GPU needs the init message: both start
// at once, while the page is still loading its own modules. The device first: its answers
// come on this thread, which Pyodide's start keeps busy (on a repeat visit in Chromium,
// SwiftShader, the adapter came 230-320 ms after it was asked for from init).
const served = typeof import.meta.url === "string" && self.name !== SNAPSHOT_WORKER;
// the snapshot's reader the page started (snapread.mjs's WITH_READER): a port to it comes in
// the page's first message; word that it failed, then or later, goes to whoever listens there
let readerCame = null;
let readerPort = null;
const pageReader = served && self.name === WITH_READER ? new Promise((ok, no) => { readerCame = { ok, no }; }) : null;
const earlyGpu = served ? newDevice({}) : null;
if (earlyGpu) earlyGpu.catch(() => {}); // asked again, and reported, by init
const early = served ? startPython(null) : null;
if (early) early.python.catch(() => {}); // reported by init

async function init(options) {
  const s = performance.now();
  if (options.interruptBuffer) interrupt = new Int32Array(options.interruptBuffer);
  // the GPU, Python and the Program cache come up concurrently
  const { cache, python } = options.files || !early ? startPython(options.files) : early;
  const gpuReady = setupGpu(options);
  // a first visit of a site that ships its samples' Programs for this adapter: the pipelines
  // of those the page opens with (options.shipped: their labels), asked for while Python starts
  // (the cache told of the site's shipped Programs first: Python asks for them by key where
  // this origin's cache lacks one, once Ready, which waits for this)
  const shippedWarm = Promise.all([siteManifest, cache, gpuReady])
    .then(([m, c]) => { shipsFrom(m, c); return warmShipped(m, c, options.shipped); })
    .catch(() => 0);
  // the pipelines of the last visit's Programs (read while the device comes), made while Python
  // starts: their instantiate takes them. Those a trainer's first step runs are asked for now;
  // the rest (the programs attached to it, used later) once the first loss exists, so that
  // where the GPU's compiler shares a few cores (SwiftShader) they do not delay the first step
  const recent = cache.then((c) => (c ? c.recentPrograms() : []));
  const ask = (entries) => entries.reduce((n, e) => {
    try {
      return n + gpu.prewarm(device, e.program);
    } catch {
      return n;
    }
  }, 0);
  const prewarmed = Promise.all([recent, gpuReady])
    .then(([entries]) => {
      const later = entries.filter((e) => e.kind === "forward");
      if (later.length) firstLoss.then(() => ask(later));
      return ask(entries.filter((e) => e.kind !== "forward"));
    })
    .catch(() => 0);
  const [, manifest] = await Promise.all([gpuReady, python]);
  timings.prewarmed = await prewarmed; // how many pipelines were asked for ahead
  timings.shipped_fetched = await shippedWarm; // how many of the site's shipped entries were fetched ahead
  let s2 = performance.now();
  hooks = {
    emit: (event, json) => {
      post({ type: "event", event, data: json === undefined ? null : JSON.parse(json) });
      if (event === "metric") lossCame(); // the first loss exists
      if (event === "metric" && snapshot) startSnapshot();
    },
    // binary data (tgweb.worker.emit_bytes: an autosave's checkpoint) is moved, not copied
    emitBytes: (event, json, bytes) => self.postMessage({ type: "event", event, data: { ...JSON.parse(json), bytes } },
      [bytes.buffer]),
    stopRequested: () => stopRequested || (interrupt !== null && Atomics.load(interrupt, 0) === 2),
    gpu: announcedGpu,
    device,
    adapterInfo: adapterInfo(adapter),
    nextDevice: () => deviceReady || Promise.resolve(device),
    programCache: await cache, // tgweb.progcache's store (progcache.mjs)
    bulk, // parameter-sized work Python would do value by value: initial values, finite checks
    fetchData: (name) => fetchBytes(new URL(name, dataBase)), // tgweb.worker.fetch_data
  };
  pyodide.registerJsModule("tgweb_js", hooks);
  // the shared flag is always read by tgweb.worker.stop_requested(); making it a Pyodide
  // interrupt too (KeyboardInterrupt anywhere, even in the middle of a step) is opt-in
  if (interrupt && options.interrupt) pyodide.setInterruptBuffer(interrupt);
  startup("importing tgweb");
  toJson = pyodide.pyimport("tgweb.worker").to_json;
  ns = pyodide.runPython("{'__name__': '__main__'}");
  const version = pyodide.runPython("import tgweb; tgweb.__version__");
  mark("import_tgweb", s2);
  mark("total", s);
  timings.since_worker_start = Math.round(performance.now() - t0);
  timings.ready_at = performance.timeOrigin + performance.now(); // epoch ms, to compare with the page
  timings.worker_created_at = performance.timeOrigin;
  timings.worker_started_at = performance.timeOrigin + t0;
  const limits = Object.fromEntries(COMPUTE_LIMITS.map((k) => [k, device.limits[k]]));
  return {
    tgweb: version, pyodide: pyodide.version, python: manifest.python, manifest: { built: manifest.built },
    adapter: adapterInfo(adapter), limits, timings, crossOriginIsolated: self.crossOriginIsolated === true,
    stopFlag: interrupt !== null, interrupt: interrupt !== null && !!options.interrupt,
  };
}

// A source run as a file (a page's prelude: its helpers): compiled from its text by
// tgweb.worker.run_file; only this small caller goes through runPythonAsync's parse
const RUN_FILE = "from tgweb.worker import run_file as __tgweb_run__\n" +
  "try:\n    await __tgweb_run__(__tgweb_source__, __tgweb_file__, globals())\n" +
  "finally:\n    del __tgweb_run__, __tgweb_source__, __tgweb_file__";

async function runFile(source, filename, globals) {
  await runSource(null, RUN_FILE, RUN_FILE_NAME, { ...globals, __tgweb_source__: source, __tgweb_file__: filename });
  return null;
}

/** A value the page hands Python (tg.run's globals, a view's call arguments). Typed arrays
 * stay JS: tgweb takes them as inputs without a copy through Python lists. Everything else
 * becomes Python data, with JavaScript's null as None wherever it stands: toPy alone makes
 * it pyodide.ffi.jsnull, which Python code does not take for None. */
function fromPage(v) {
  if (ArrayBuffer.isView(v) || v instanceof ArrayBuffer) return v;
  return pyodide.toPy(withoutNull(v));
}

function withoutNull(v) {
  if (v === null) return undefined; // Pyodide makes undefined None
  if (Array.isArray(v)) return v.map(withoutNull);
  const proto = v !== undefined && typeof v === "object" ? Object.getPrototypeOf(v) : undefined;
  if (proto === Object.prototype || proto === null) {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, withoutNull(x)]));
  }
  return v;
}

async function runSource(id, source, filename, globals) {
  if (fatal) throw new Error(fatal);
  stopRequested = false;
  if (interrupt) Atomics.store(interrupt, 0, 0);
  for (const [name, v] of Object.entries(globals || {})) ns.set(name, fromPage(v));
  // micropip is bundled, but loaded only for a source that uses it
  if (/\bmicropip\b/.test(source)) await pyodide.loadPackage("micropip", { messageCallback: () => {} });
  let value = await pyodide.runPythonAsync(source, { globals: ns, filename });
  if (value && typeof value === "object" && typeof value.destroy === "function" && pyodide.ffi &&
      value instanceof pyodide.ffi.PyProxy) {
    const proxy = value;
    try {
      value = JSON.parse(toJson(proxy));
    } finally {
      proxy.destroy();
    }
  } else if (value === undefined) {
    value = null;
  } else if (typeof value === "number" && !Number.isFinite(value)) {
    value = null;
  } else if (typeof value === "bigint") {
    value = Number(value);
  } else if (value !== null && typeof value === "object") {
    // a JS object returned from Python (e.g. a typed array): make it cloneable JSON
    value = ArrayBuffer.isView(value) ? Array.from(value) : JSON.parse(JSON.stringify(value));
  }
  return value;
}

// errors outside any run (Python callbacks on the event loop, GPU promise failures) go
// to the page as log lines; they do not end the worker
self.addEventListener("unhandledrejection", (ev) => {
  ev.preventDefault();
  post({ type: "event", event: "log", data: { stream: "stderr", level: "error", text: String(ev.reason && ev.reason.message || ev.reason) } });
});

self.onmessage = (ev) => {
  const m = ev.data || {};
  if (m.type === "reader") {
    if (m.port && readerCame) {
      readerPort = m.port;
      readerCame.ok(m.port);
    } else if (m.failed && readerPort) { // after the port: to whoever listens there
      readerPort.dispatchEvent(new MessageEvent("message", { data: { failed: m.failed } }));
    } else if (m.failed && readerCame) { // no port will come: the file is read here
      readerCame.no(new Error(m.failed));
    }
    readerCame = null;
  } else if (m.type === "init") {
    if (ready) return;
    heard = true;
    for (const data of unheard.splice(0)) post({ type: "event", event: "startup", data });
    ready = init(m.options || {}).then(
      (info) => {
        post({ type: "ready", info });
        snapshotWhenIdle();
      },
      (e) => {
        fatal = `tgweb failed to start: ${e && e.message ? e.message : e}`;
        post({ type: "error", id: null, error: { ...serializeError(e), fatal: true } });
      },
    );
  } else if (m.type === "run") {
    const filename = m.filename || "main.py";
    runsPending += 1;
    clearTimeout(idleTimer);
    queue = queue.then(async () => {
      await ready;
      try {
        const value = m.file ? await runFile(m.source, filename, m.globals)
          : await runSource(m.id, m.source, filename, m.globals);
        post({ type: "result", id: m.id, value });
      } catch (e) {
        const error = serializeError(e, filename);
        if (error.pyType === "Stopped" || error.pyType === "KeyboardInterrupt") error.stopped = true;
        post({ type: "error", id: m.id, error });
      } finally {
        // a stop request that came late must not hit the next run or the event loop
        if (interrupt) Atomics.store(interrupt, 0, 0);
        stopRequested = false;
        runsPending -= 1;
        snapshotWhenIdle();
      }
    });
  } else if (m.type === "stop") {
    stopRequested = true;
  } else if (m.type === "snapshot" && self.name === SNAPSHOT_WORKER) {
    snapshotJob(m).then((result) => post({ type: "snapshot", result }),
      (e) => post({ type: "snapshot", result: { error: String(e && e.message || e) } }));
  }
};
