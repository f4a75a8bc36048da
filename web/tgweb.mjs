// tgweb.mjs: the embedding API. Runs tgweb (Python, in Pyodide, in a module
// worker that owns the WebGPU device) from any page of the bundled site.
//
//   import { start } from "./tgweb.mjs";
//   const tg = await start();                       // Pyodide + tgweb + GPU device ready
//   tg.on("progress", (p) => bar.value = p.step / p.total);
//   tg.on("metric", (m) => chart.add(m.step, m.value));
//   tg.on("log", (l) => console.log(l.text));
//   const loss = await tg.run(`
//   from tgweb import worker
//   ...
//   worker.metric("loss", loss, step=i)
//   loss                                            # the last expression is the result
//   `);
//   tg.stop();   // the running script raises tgweb.worker.Stopped at its next check / GPU wait
//   tg.close();
//
// run() resolves to the JSON value of the source's last expression, or rejects
// with an Error whose message is the Python traceback (error.pyType, error.line,
// and for GPU failures error.kernel, error.ops, error.site). Sources run one after
// another in one persistent namespace, like cells of a notebook.

import { noWebGPU } from "./device.mjs";
import { openStore } from "./store.mjs";
import { readerFor, WITH_READER } from "./snapread.mjs";
import { versioned } from "./versioned.mjs";

export { CorruptRun, openStore } from "./store.mjs";
export { openProgramCache } from "./progcache.mjs"; // the compiled Programs: list(), remove(key), clear()

const DEFAULT_TIMEOUT_MS = 180000;

/** An error from the worker: a Python exception, a GPU failure or a startup failure. */
export class TgwebError extends Error {
  constructor(info) {
    super(info.message);
    this.name = info.name === "PythonError" ? "PythonError" : (info.name || "TgwebError");
    for (const k of ["pyType", "traceback", "line", "kernel", "ops", "site", "compiler", "fatal", "stopped"]) {
      if (info[k] !== undefined) this[k] = info[k];
    }
  }
}

/**
 * Start a worker; resolves once it has Pyodide, tgweb and a GPU device.
 * options: {
 *   base:     URL of the bundled site (default: the folder holding this file),
 *   timeout:  ms to wait for startup before rejecting (default 180000),
 *   powerPreference: "high-performance" | "low-power",
 *   on:       {event: handler} registered before startup (e.g. log lines while loading),
 *   files:    {name: ["t", text] | ["z", base64 of gzip]}: run from these files instead of
 *             the site (default: tgwebDisk.files, set by disk-loader.js on a page opened
 *             from disk or the single file); the worker is then a classic Blob worker,
 *   interrupt: true: stop() also interrupts Python anywhere (KeyboardInterrupt), even in
 *             the middle of a training step; needs a cross-origin isolated page. Default:
 *             stop() only sets the flag that tgweb.worker.check_stop() and each GPU step read.
 *   autosave: true or {store, details}: keep the runs that Python's tgweb.worker.autosave()
 *             sends in tg.store (store.mjs; default: openStore()), under their name, with
 *             details(event)'s fields added; each save then emits "autosaved" (the saved
 *             run's pointer) or "autosave-error" (an Error: quota exceeded, private mode);
 *             tg.saving counts the saves not yet answered (0: every save has settled).
 *   shipped:  [label, ...]: a served site that ships compiled Programs for this adapter
 *             (tools/ship_programs.py) has their pipelines made for these labels (the trainer
 *             page: the sample it opens with) while Python starts, where this origin's cache
 *             lacks them.
 *   prelude:  {source, filename}: Python (source: a string or a promise of one) run first,
 *             as the worker is ready: a page's own helpers. Sent with the start, it runs
 *             without waiting for the page to hear that the worker is ready; start() resolves
 *             once it has run, and rejects with its error.
 * }
 */
export async function start(options = {}) {
  const t0 = performance.now();
  // fail at once, before a worker loads Pyodide (device.mjs says why, for the worker too)
  if (noWebGPU()) throw new TgwebError({ name: "NoWebGPU", message: `tgweb needs WebGPU: ${noWebGPU()}` });
  const files = options.files || (globalThis.tgwebDisk && globalThis.tgwebDisk.files);
  const tg = new Tgweb(files ? classicWorker(files) : moduleWorker(options));
  tg.files = files || null;
  for (const [event, fn] of Object.entries(options.on || {})) tg.on(event, fn);
  let readyAt = null;
  try {
    // the worker starts at once; the store opens meanwhile
    const keeping = options.autosave ? tg.keepRuns(options.autosave === true ? {} : options.autosave) : null;
    const ready = tg._start(options, options.timeout || DEFAULT_TIMEOUT_MS).then((info) => {
      readyAt = performance.now();
      tg.info = info;
    });
    const prelude = options.prelude ? Promise.resolve(options.prelude.source).then((source) =>
      tg.run(source, { filename: options.prelude.filename, file: true })) : null;
    await Promise.all([ready, keeping, prelude]);
  } catch (e) {
    tg.close();
    throw e;
  }
  const t = tg.info.timings;
  t.start_to_ready = Math.round(readyAt - t0);
  t.page_load_to_ready = Math.round(readyAt); // since navigation start
  // when each came, on the page's clock (the worker's marks are epoch ms)
  const since = (epoch) => Math.round(epoch - performance.timeOrigin);
  t.since_page_load = { start_call: Math.round(t0), worker_created: since(t.worker_created_at),
    worker_started: since(t.worker_started_at), ready: since(t.ready_at) };
  return tg;
}

function moduleWorker(options) {
  const early = globalThis.tgwebWorker; // started by the page before its modules loaded
  if (early && !options.base) {
    globalThis.tgwebWorker = null;
    return early;
  }
  const base = new URL(options.base || "./", options.base ? location.href : import.meta.url);
  // this build's files where they are this module's own site (another base: as they are there)
  const at = (name) => (options.base ? new URL(name, base) : versioned(name, base));
  // a worker must be same-origin with the page: loading tgweb from another origin (a
  // static host, with CORS), the worker is a same-origin module that imports it
  const worker = at("worker.mjs");
  if (worker.origin !== location.origin) { // (such a worker starts its snapshot's reader itself)
    const url = URL.createObjectURL(new Blob([`import ${JSON.stringify(worker.href)};`], { type: "text/javascript" }));
    return new Worker(url, { type: "module", name: "tgweb" });
  }
  // the snapshot's reader starts beside it, as the trainer page's does (disk-loader.js)
  const w = new Worker(worker, { type: "module", name: WITH_READER });
  readerFor(w, at("snapread.mjs?reader"));
  return w;
}

// Opened from disk or as the single file (disk-loader.js): no module worker and no fetch
// there, so the worker is a classic script from a Blob URL, and it gets every file it
// would fetch (Pyodide, the wheels) with the init message.
function classicWorker(files) {
  const source = files["worker.js"];
  if (!source) throw new TgwebError({ name: "WorkerError", fatal: true, message: "the page's bundle has no worker.js" });
  const url = URL.createObjectURL(new Blob([source[1]], { type: "text/javascript" }));
  return new Worker(url, { name: "tgweb" });
}

class Tgweb {
  constructor(worker) {
    this.worker = worker;
    this.handlers = new Map();
    this.pending = new Map();
    this.nextId = 1;
    this.closed = false;
    this.info = null;
    this.interrupt = null;
    if (typeof SharedArrayBuffer !== "undefined" && self.crossOriginIsolated) {
      this.interrupt = new Int32Array(new SharedArrayBuffer(4));
    }
    worker.onmessage = (ev) => this._message(ev.data);
    worker.onerror = (ev) => {
      ev.preventDefault();
      const message = `the tgweb worker failed: ${ev.message || "could not load worker.mjs (is the site served?)"}`;
      if (this._starting) {
        this._fail(new TgwebError({ name: "WorkerError", fatal: true, message }));
      } else {
        this._emit("log", { stream: "stderr", level: "error", text: message });
      }
    };
    worker.onmessageerror = () => this._emit("error", new TgwebError({ message: "unreadable message from the worker" }));
  }

  _start(options, timeout) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new TgwebError({ name: "Timeout", fatal: true,
        message: `tgweb did not start within ${timeout / 1000} s` })), timeout);
      this._starting = {
        resolve: (info) => { clearTimeout(timer); resolve(info); },
        reject: (e) => { clearTimeout(timer); reject(e); },
      };
      this.worker.postMessage({ type: "init", options: {
        interruptBuffer: this.interrupt ? this.interrupt.buffer : null,
        interrupt: !!options.interrupt,
        powerPreference: options.powerPreference || null,
        files: this.files,
        shipped: Array.isArray(options.shipped) ? options.shipped.map(String) : null,
      } });
    });
  }

  /** What the autosave option does, for a page that opens its store while tgweb starts:
   *  keep the runs Python's tgweb.worker.autosave() sends in store (default: openStore()). */
  async keepRuns({ store, details } = {}) {
    this.store = store || (await openStore());
    this.saving = 0;
    this.on("autosave", async (a) => {
      const { bytes, name, ...info } = a;
      this.saving++;
      try {
        const extra = details ? await details(a) : {};
        const pointer = await this.store.saveRun(name, { ...info, ...extra, bytes });
        this.saving--;
        this._emit("autosaved", pointer);
      } catch (e) {
        this.saving--;
        this._emit("autosave-error", e);
      }
    });
  }

  _message(m) {
    if (m.type === "ready") {
      if (this._starting) this._starting.resolve(m.info);
      this._starting = null;
    } else if (m.type === "result") {
      const p = this.pending.get(m.id);
      this.pending.delete(m.id);
      if (p) p.resolve(m.value);
    } else if (m.type === "error") {
      const err = new TgwebError(m.error);
      if (m.id == null) {
        this._fail(err);
      } else {
        const p = this.pending.get(m.id);
        this.pending.delete(m.id);
        if (p) p.reject(err);
      }
    } else if (m.type === "event") {
      this._emit(m.event, m.data);
    }
  }

  _fail(err) {
    if (this._starting) {
      this._starting.reject(err);
      this._starting = null;
    }
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    this.dead = err;
    this._emit("error", err);
  }

  _emit(event, data) {
    for (const key of [event, "*"]) {
      for (const fn of this.handlers.get(key) || []) {
        try {
          key === "*" ? fn(event, data) : fn(data);
        } catch (e) {
          console.error(`tgweb: a "${event}" handler threw`, e);
        }
      }
    }
  }

  /** Handle events: "progress", "metric", "log", "error", any name Python emits, or "*"
   *  (handler gets (event, data)). Returns a function that removes the handler. */
  on(event, handler) {
    if (!this.handlers.has(event)) this.handlers.set(event, new Set());
    this.handlers.get(event).add(handler);
    return () => this.off(event, handler);
  }

  off(event, handler) {
    const s = this.handlers.get(event);
    if (s) s.delete(handler);
  }

  /** Run Python source; resolves to the JSON value of its last expression.
   *  options: {filename} names the source in tracebacks (default "main.py");
   *  {globals: {name: value}} sets Python globals first: JSON values become Python data,
   *  typed arrays arrive as JS typed arrays (usable directly as step inputs);
   *  {file: true} runs the source as a file, as Python runs a module: the value is null
   *  (no last expression's value is looked for), and a long source starts sooner. */
  run(source, options = {}) {
    if (this.closed) return Promise.reject(new TgwebError({ message: "tgweb was closed" }));
    if (this.dead) return Promise.reject(this.dead);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ type: "run", id, source: String(source), filename: options.filename,
        globals: options.globals, file: !!options.file });
    });
  }

  /** Ask the running script to stop: it raises tgweb.worker.Stopped at its next check_stop() or
   *  GPU step (KeyboardInterrupt anywhere with start({interrupt: true})), and its run() rejects
   *  with error.stopped = true. Without cross-origin isolation the request reaches Python only
   *  while it waits (each GPU step waits), so a pure-Python loop cannot see it. */
  stop() {
    if (this.closed) return;
    if (this.interrupt) Atomics.store(this.interrupt, 0, 2);
    this.worker.postMessage({ type: "stop" });
  }

  /** Terminate the worker (and its GPU device); pending runs reject. */
  close() {
    if (this.closed) return;
    this.closed = true;
    this.worker.terminate();
    const err = new TgwebError({ message: "tgweb was closed" });
    for (const p of this.pending.values()) p.reject(err);
    this.pending.clear();
    if (this._starting) this._starting.reject(err);
    this._starting = null;
  }
}
