// Bundles the trainer page (web/app.mjs and what it imports) and the tgweb worker
// (web/worker.mjs and its imports: gpu.mjs, device.mjs, ...) into classic scripts, for
// pages opened from disk, where Chromium refuses module scripts and module workers.
// build.py runs it:
//
//   node tools/disk_bundle.mjs OUT_DIR [WEB_DIR]
//
// writes OUT_DIR/app.js (one function, tgwebDiskApp, that starts the page) and
// OUT_DIR/worker.js (the worker, a classic script). A module
// that an import names but that is not there yet (a sample's view still being
// written) becomes a stub whose render() says so, so one missing view does not stop
// the page.
import { build } from "esbuild";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const out = process.argv[2];
const web = resolve(process.argv[3] || join(dirname(fileURLToPath(import.meta.url)), "..", "web"));
if (!out) throw new Error("usage: node tools/disk_bundle.mjs OUT_DIR [WEB_DIR]");

const missing = {
  name: "missing-modules",
  setup(b) {
    b.onResolve({ filter: /^\.\.?\// }, (args) => {
      if (args.kind === "dynamic-import") return { path: args.path, external: true };
      const path = resolve(args.resolveDir, args.path);
      return existsSync(path) ? { path } : { path, namespace: "missing" };
    });
    b.onLoad({ filter: /.*/, namespace: "missing" }, (args) => ({
      contents: `export function render(body) {
  const p = document.createElement("p");
  p.className = "error";
  p.textContent = ${JSON.stringify(`${args.path.slice(web.length + 1)} was missing when the page was bundled; run python3 build.py setup again`)};
  body.replaceChildren(p);
}`,
      loader: "js",
    }));
  },
};

const common = {
  bundle: true, write: true, format: "iife", target: "es2022",
  legalComments: "none", plugins: [missing], logLevel: "warning",
  // import.meta.url is only read on the served (module) path, never in these bundles
  logOverride: { "empty-import-meta": "silent" },
};
await build({ ...common, entryPoints: [join(web, "app.mjs")], outfile: join(out, "app.js"),
  banner: { js: "globalThis.tgwebDiskApp = function () {" }, footer: { js: "};" } });
await build({ ...common, entryPoints: [join(web, "worker.mjs")], outfile: join(out, "worker.js") });
