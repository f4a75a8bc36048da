// pyodidefiles.mjs: how Pyodide's files reach tgweb's worker (worker.mjs) and how its
// WebAssembly is compiled. Served, the site's files come over the network at this build's
// URLs (versioned.mjs), the big ones asked for at once (fetchAhead) and the wasm compiled
// as it arrives; opened from disk, they come from the page's bundle in memory (serveFiles).
// Either way Pyodide's loader is wrapped so that the small wasm modules Emscripten makes
// while Python starts are compiled once each (shareSmallModules).

import { versioned } from "./versioned.mjs";

// Started with files (a page opened from disk, or the single file; see disk-loader.js):
// the worker is a classic worker, fetch is refused on file://, so every file is served from
// memory under a made-up base (.invalid never resolves), and Pyodide's module script
// (pyodide.asm.mjs, rewritten by build.py as the classic pyodide.asm.js) runs as a
// script from a Blob URL. The served site takes the same steps with real URLs.
export const FILES_BASE = "https://tgweb.invalid/";

export function serveFiles(files) {
  const netFetch = self.fetch.bind(self);
  const types = { wasm: "application/wasm", json: "application/json", js: "text/javascript" };
  self.fetch = async (req, init) => {
    const href = typeof req === "string" ? req : req instanceof URL ? req.href : req.url;
    if (!href.startsWith(FILES_BASE)) return netFetch(req, init);
    const name = href.slice(FILES_BASE.length).split(/[?#]/)[0];
    if (!files[name]) return new Response(`${name} is not in the page's bundle`, { status: 404 });
    const type = types[name.split(".").pop()] || "application/octet-stream";
    return new Response(fileBody(files[name]), { headers: { "Content-Type": type } });
  };
}

function fileBody([kind, data]) {
  if (kind === "t") return data;
  const gz = Uint8Array.fromBase64 ? Uint8Array.fromBase64(data) : Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  return new Blob([gz]).stream().pipeThrough(new DecompressionStream("gzip"));
}

async function filesPyodide(files) {
  // Pyodide refuses classic workers, where it would load its scripts with importScripts;
  // this one runs them itself, here, and then looks like a module worker to Pyodide
  const runScript = self.importScripts.bind(self);
  self.importScripts = () => { throw new TypeError("tgweb's worker loads no scripts by URL"); };
  for (const name of ["pyodide/pyodide.js", "pyodide/pyodide.asm.js"]) {
    const text = await new Response(fileBody(files[name])).text();
    const url = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
    try {
      runScript(url); // pyodide.js defines loadPyodide, pyodide.asm.js _createPyodideModule
    } finally {
      URL.revokeObjectURL(url);
    }
  }
  return (opts) => self.loadPyodide({ ...opts, createPyodideModule: self._createPyodideModule });
}

// Pyodide's big files and its lock file, asked for now: Pyodide asks for them only once
// pyodide.mjs has come (and the wasm and the standard library once the lock file has), and
// then takes these responses, already on their way. (Fetched by the page as it parses,
// they took connections and the server's time from the worker's own modules: slower.) The
// wasm is compiled as it arrives, from now: Pyodide would start only once its script and a
// snapshot's bytes are in. Resolves to the compiled module (rejects: Pyodide compiles it).
export function fetchAhead(base) {
  const netFetch = self.fetch;
  const ahead = new Map();
  for (const name of ["pyodide/pyodide.asm.wasm", "pyodide/python_stdlib.zip", "pyodide/pyodide-lock.json"]) {
    const url = new URL(name, base).href; // as Pyodide asks for it; fetched at this build's URL
    const response = netFetch.call(self, versioned(url));
    response.catch(() => {}); // Pyodide's own fetch reports it
    ahead.set(url, response);
  }
  const wasm = new URL("pyodide/pyodide.asm.wasm", base).href;
  const compiled = WebAssembly.compileStreaming(ahead.get(wasm));
  // what Pyodide's own fetch of the wasm gets: nothing to read where it was compiled here
  // (watchWasm hands Pyodide the module), else the file afresh
  ahead.set(wasm, compiled.then(() => new Response(null), () => netFetch.call(self, versioned(wasm))));
  self.fetch = (req, init) => {
    const href = typeof req === "string" ? req : req instanceof URL ? req.href : req.url;
    const response = ahead.get(href);
    if (!response) return netFetch.call(self, req, init);
    ahead.delete(href);
    if (!ahead.size) self.fetch = netFetch;
    return response;
  };
  return compiled;
}

// Pyodide's loader from the site's folder (base; files: from the page's bundle, served by
// serveFiles under FILES_BASE), which shares its small modules while it runs and then tells
// smallModules(shareSmallModules' figures)
export async function pyodideLoader(files, base, smallModules) {
  const load = files ? await filesPyodide(files) : await servedPyodide(base);
  const loadPyodide = async (opts) => {
    const sharing = shareSmallModules();
    try {
      return await load(opts);
    } finally {
      smallModules(sharing.end());
    }
  };
  return { loadPyodide, indexURL: new URL("pyodide/", base).href };
}

// Pyodide's module script (1.2 MB) at this build's URL, which Pyodide's own import would
// ask for without the version: imported as early as the worker can and handed to loadPyodide
export const asmModule = (base) => import(versioned("pyodide/pyodide.asm.mjs", base).href);

async function servedPyodide(base) {
  const asm = asmModule(base);
  const { loadPyodide } = await import(versioned("pyodide/pyodide.mjs", base).href);
  return async (opts) => loadPyodide({ ...opts, createPyodideModule: (await asm).default });
}

// Where WebAssembly.Function is missing (Chromium), Emscripten wraps each JS function that
// Pyodide puts in its function table in a wasm function of a module of its own, compiled
// from a few dozen bytes that depend only on the signature (convertJsFunctionToWasm): about
// 260 compiles while Python starts, of some 30 distinct modules, each a compile and a
// code-cache lookup on the worker's thread. Until end(), a module of at most SMALL_MODULE
// bytes is compiled once for each distinct content and the same WebAssembly.Module given
// again (a module is instantiated any number of times); larger ones, and every other use
// of the constructor, are the original's. end() puts the original back and returns
// {compiled, shared}: the distinct small modules, and how many times one was given again.
const SMALL_MODULE = 64;

function shareSmallModules() {
  const Original = WebAssembly.Module;
  const made = new Map();
  let shared = 0;
  function Module(bytes, ...more) {
    if (new.target === Module && !more.length && bytes instanceof Uint8Array && bytes.length <= SMALL_MODULE) {
      const key = String.fromCharCode(...bytes);
      const known = made.get(key);
      if (known) {
        shared += 1;
        return known;
      }
      const module = new Original(bytes);
      made.set(key, module);
      return module;
    }
    // called without new it throws as the original does
    return new.target ? Reflect.construct(Original, [bytes, ...more], new.target === Module ? Original : new.target)
      : Original(bytes, ...more);
  }
  Module.prototype = Original.prototype; // instanceof holds for every module
  Object.setPrototypeOf(Module, Original); // and Module.exports, imports, customSections are there
  WebAssembly.Module = Module;
  return {
    end() {
      if (WebAssembly.Module === Module) WebAssembly.Module = Original;
      return { compiled: made.size, shared };
    },
  };
}

// a file of the site (at this build's URL)
export async function fetchBytes(url) {
  const r = await fetch(versioned(url));
  if (!r.ok) throw new Error(`${url.pathname.split("/").pop()}: HTTP ${r.status}`);
  return new Uint8Array(await r.arrayBuffer());
}

// Pyodide's instantiation of its wasm, watched: on.compiling() as it starts (the wasm streamed
// in and compiled, or `compiled`: fetchAhead's module, or null), on.instance() once it is
// instantiated, on.done() after either way. Resolves to the compiled module, which the
// snapshot's worker instantiates again without compiling.
export function watchWasm(compiled, on) {
  const streaming = WebAssembly.instantiateStreaming;
  return new Promise((resolve) => {
    WebAssembly.instantiateStreaming = async (response, imports) => {
      on.compiling();
      try {
        const module = compiled && await compiled.catch(() => null);
        const out = module ? { module, instance: await WebAssembly.instantiate(module, imports) }
          : await streaming.call(WebAssembly, response, imports);
        on.instance();
        resolve(out.module);
        return out;
      } finally {
        WebAssembly.instantiateStreaming = streaming;
        on.done();
      }
    };
  });
}
