// snapread.mjs: the kept Pyodide snapshot's file, in the origin's private file system
// (OPFS): where it is, reading it, its SHA-256 (progcache.mjs keeps it and its record).
//
// Run as a worker named READER (started by a served page beside tgweb's worker, readerFor,
// and answering on the port it is given; else by that worker, progcache.mjs's
// readSnapshotAhead, as Python starts to load), it reads the file and answers {bytes}
// (moved, not copied) at once, then {sha256} of a copy (Pyodide restores from the bytes
// meanwhile, and Python runs once the hash agrees), or {error}. Both take the thread they run on for tens
// of milliseconds (31.5 MB read, then SHA-256, whose call in Chromium does its work before
// it returns): on tgweb's worker they held up Pyodide's wasm, which streams in on that
// thread meanwhile. Each answer has `times` (epochNow marks: started, read, hashed). This
// file imports nothing, so that the reader starts at once.

export const SNAPSHOT_DIR = "tgweb-snapshots", SNAPSHOT_FILE = "memory", READER = "tgweb-snapshot-reader";
// tgweb's worker named so gets its reader from the page (readerFor): one the page started
// beside it (disk-loader.js, tgweb.mjs), whose answers come through a MessageChannel port
export const WITH_READER = "tgweb+reader";

/** The snapshot's directory, or null where there is no file system (file://, old browsers). */
export async function snapshotDir() {
  try {
    return await (await navigator.storage.getDirectory()).getDirectoryHandle(SNAPSHOT_DIR, { create: true });
  } catch { // no navigator.storage, or an opaque origin (file://)
    return null;
  }
}

/** The kept snapshot's file (rejects where there is none or no file system). */
export async function readSnapshotFile() {
  const dir = await snapshotDir();
  if (!dir) throw new Error("the browser's file system is not there");
  const handle = await dir.getFileHandle(SNAPSHOT_FILE);
  // a worker's synchronous handle ("read-only": other tabs may read it at the same time)
  const sync = handle.createSyncAccessHandle ? await handle.createSyncAccessHandle({ mode: "read-only" }).catch(() => null) : null;
  if (!sync) return new Uint8Array(await (await handle.getFile()).arrayBuffer()); // a page's, or it is held
  try {
    const bytes = new Uint8Array(sync.getSize());
    for (let at = 0; at < bytes.byteLength;) {
      const n = sync.read(bytes.subarray(at), { at });
      if (!n) throw new Error(`it ends after ${at} bytes`);
      at += n;
    }
    return bytes;
  } finally {
    sync.close();
  }
}

export async function sha256(bytes) {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** For a page that starts tgweb's worker (named WITH_READER): the snapshot's reader,
 *  started now beside it (readerUrl: this file, at a URL of its own), and a channel to it,
 *  whose port the worker gets in a message {type: "reader", port}; a reader that does not
 *  start is said to the worker ({type: "reader", failed}), which then reads the file itself. */
export function readerFor(worker, readerUrl) {
  const { port1, port2 } = new MessageChannel();
  worker.postMessage({ type: "reader", port: port2 }, [port2]);
  const failed = (why) => worker.postMessage({ type: "reader", failed: String(why) });
  try {
    const reader = new Worker(readerUrl, { type: "module", name: READER });
    reader.onerror = (ev) => failed(ev.message || "the snapshot's reader did not start");
    reader.postMessage(null, [port1]);
  } catch (e) {
    failed(e && e.message ? e.message : e);
  }
}

/** Now, in ms since the epoch (comparable across workers: timings.snapshot_ms). */
export const epochNow = () => performance.timeOrigin + performance.now();

if (typeof self !== "undefined" && self.name === READER) {
  const started = epochNow();
  self.onmessage = async (ev) => {
    const to = ev.ports[0] || self; // a port from the page (WITH_READER), or the worker that made this one
    try {
      const bytes = await readSnapshotFile();
      // the bytes go at once (Pyodide restores from them meanwhile), then the hash of a copy
      const copy = bytes.slice();
      to.postMessage({ bytes, times: { started, read: epochNow() } }, [bytes.buffer]);
      to.postMessage({ sha256: await sha256(copy), times: { hashed: epochNow() } });
    } catch (e) {
      to.postMessage({ error: String((e && e.message) || e) });
    }
    if (to !== self) self.close(); // the page's: nobody else ends it
  };
}
