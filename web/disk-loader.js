// disk-loader.js: starts the trainer page where module scripts cannot run. Opened from
// disk (file://), Chromium refuses module scripts, module workers and fetch, but runs
// classic scripts and workers made from Blob URLs, and counts file:// as a secure
// context (WebGPU is there). The single file (dist/tgweb.html) runs the same way from
// any host. Served over http (build.py serve), this script only adds app.mjs as a module
// script: index.html has no module script tag, which on file:// would log an error.
//
// `python3 build.py setup` writes web/disk/ (git-ignored), two classic scripts:
//   data.js  tgwebDisk.files = {name: ["t", text] | ["z", base64 of gzip]}: every file
//            the worker and the page would fetch (Pyodide, the wheels, manifest.json,
//            page/*.py) and "worker.js" (worker.mjs and its imports as a classic script)
//   app.js   tgwebDiskApp(): app.mjs and its imports as one classic script
// tgweb.mjs then starts its worker from a Blob URL of worker.js and hands it the files;
// the worker serves Pyodide's fetches from them (worker.mjs, serveFiles).
(function () {
  "use strict";
  if (!(globalThis.tgwebDisk && globalThis.tgwebDisk.files) && location.protocol !== "file:") {
    // the worker starts (and loads Python) now, while the page's modules load; tgweb.mjs's
    // start() takes it. The reader of the Python snapshot a visit kept starts beside it
    // (snapread.mjs's readerFor): its bytes come sooner than from a reader the worker would
    // start once its own modules are in.
    // (at the version of the site this script's URL names, as web/versioned.mjs does)
    const src = document.currentScript.src;
    const version = new URL(src).searchParams.get("v");
    const at = (name) => {
      const url = new URL(name, src);
      if (version) url.searchParams.set("v", version);
      return url;
    };
    if (navigator.gpu) {
      const worker = new Worker(at("worker.mjs"), { type: "module", name: "tgweb+reader" });
      import(at("snapread.mjs").href).then((m) => m.readerFor(worker, at("snapread.mjs?reader")),
        (e) => worker.postMessage({ type: "reader", failed: String(e) }));
      globalThis.tgwebWorker = worker;
    }
    const app = document.createElement("script");
    app.type = "module";
    app.src = at("app.mjs").href;
    document.head.append(app);
    return;
  }
  const disk = (globalThis.tgwebDisk = globalThis.tgwebDisk || {});

  // the page's own reads (app.mjs's fetchText: page/harness.py, page/samples/<name>.py)
  disk.text = async (name) => {
    const entry = disk.files[name];
    if (!entry) throw new Error(`${name} is not in the page's bundle (it was missing when the page was bundled)`);
    if (entry[0] === "t") return entry[1];
    const gz = Uint8Array.from(atob(entry[1]), (c) => c.charCodeAt(0));
    return new Response(new Blob([gz]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  };

  function load(src) {
    return new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = () => reject(new Error(`${src} is missing`));
      document.head.append(s);
    });
  }

  // where the checkout is, so that the command can be run where it must be
  function checkout() {
    const path = decodeURIComponent(location.pathname);
    const m = /^(.*)\/web\/[^/]*$/.exec(path);
    return m ? m[1] || "/" : null;
  }

  function missing(e) {
    const dir = checkout();
    const status = document.getElementById("status");
    status.textContent = "This page, opened from disk, needs its offline bundle (web/disk/), which has not " +
      `been built yet (${e.message}). Run \`python3 build.py setup\` in the tgweb checkout` +
      (dir ? ` (${dir})` : "") + ", then reload this page. Or serve it: `python3 build.py serve`.";
    status.dataset.kind = "error";
    disk.missing = e.message;
  }

  async function main() {
    if (!disk.files) await load("disk/data.js");
    if (!globalThis.tgwebDiskApp) await load("disk/app.js");
    globalThis.tgwebDiskApp();
  }

  main().catch(missing);
})();
