// versioned.mjs: the site's files at the URLs of this build of the site. build.py's bundle
// names a version of the site (a hash of its files: manifest.json's "version") in the URL of
// each module the site's own modules import ("./gpu.mjs?v=...") and of the page's two
// scripts; the URLs the modules make themselves (workers, the manifest, the wheel, the
// snapshot, the samples' sources and data, the shipped Programs) take the same version from
// here. Pyodide's own files (its module scripts, wasm, standard library, lock file and
// wheels) take a version of their own, which changes with Pyodide alone: a new build of tgweb
// leaves a browser's copy of them, and V8's compiled code of Pyodide, in place. A browser may
// keep every file but the page for good (`build.py serve` says so: immutable), so a repeat
// visit asks the server for the page alone. Where this module has no version (web/ itself,
// the page opened from disk) URLs are left as they are.

const HERE = typeof import.meta.url === "string" ? new URL(import.meta.url) : null;
const VERSION = HERE && HERE.searchParams.get("v");
// written by build.py's bundle: {version, files}, Pyodide's files' version and their names
const PYODIDE = null;
const PYODIDE_FILES = new Set(PYODIDE && HERE ? PYODIDE.files.map((name) => new URL(`pyodide/${name}`, HERE).href) : []);

/** url (resolved against base) with the version of its file in its query, where there is one. */
export function versioned(url, base) {
  const u = new URL(url, base);
  const version = PYODIDE_FILES.has(u.href.split(/[?#]/)[0]) ? PYODIDE.version : VERSION;
  if (version) u.searchParams.set("v", version);
  return u;
}
