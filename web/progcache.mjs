// progcache.mjs: the compiled Programs a page keeps (tgweb/progcache.py), in IndexedDB
// (database "tgweb-programs": each key's text in one store, what is known of it in another,
// so that listing and pruning the entries or marking one used never reads or writes a
// text), so that a repeat visit skips tracing and lowering. The worker reads and writes
// them for Python; a page lists and clears them:
//
//   const cache = await openProgramCache();  // or tg.programs (tgweb.mjs)
//   await cache.list();     // [{key, label, kind, size, time, used, kernels}], newest first
//   await cache.remove(key);
//   await cache.clear();
//
// A served site may ship entries of its own (its samples' Programs for the adapters it was
// built for: tools/ship_programs.py, manifest.json's "programs"): a key the cache lacks is
// asked of the site (shipped), and Python keeps what it finds here.
//
// An entry's text carries its own checksum, which Python checks before it uses one: a
// damaged or truncated entry is removed and compiled again, never run.
//
// The entries are bounded, so that a model edited many times does not fill the origin's
// storage: after each put, the least recently used go until at most maxEntries (200) and
// maxBytes (48 MiB of Program text) are kept; the entry just put always stays.
//
// It also keeps one Pyodide memory snapshot (makeSnapshot, after a first visit's first step):
// the interpreter's memory after importing tgweb, keyed by the hashes of Pyodide's files and
// of the tgweb wheel, with its SHA-256 (its bytes in a file of the origin's private file
// system where there is one, else in IndexedDB: snapread.mjs); a repeat visit restores
// it (bootPython) instead of booting Python and importing tgweb. A served site carries the
// same snapshot, made when it was bundled (tools/site_snapshot.mjs, manifest.json's
// "snapshot"): its first visit restores that one and keeps its bytes here for the next.

import { epochNow, READER, readSnapshotFile, sha256, SNAPSHOT_FILE, snapshotDir } from "./snapread.mjs";
import { versioned } from "./versioned.mjs";

const NAME = "tgweb-programs", VERSION = 2, STORE = "programs", METAS = "metas", SNAPSHOTS = "snapshots";
const INFO = "size "; // what is kept of a snapshot (its size, checksum, file) is under this and its key
// what the snapshot holds done: tgweb and what a first step imports, the build id hashed
const PRELOAD = "import tgweb, tgweb.worker; tgweb.worker.preload()";

const done = (req) => new Promise((resolve, reject) => {
  req.onsuccess = () => resolve(req.result);
  req.onerror = () => reject(req.error);
});

const LIMITS = { maxEntries: 200, maxBytes: 48 << 20 };

/** An entry's Program (its JSON text): the entry is its format line, its checksum, then
 *  {"program": Program JSON, ...}. Throws where the text is not an entry. */
export function entryProgram(text) {
  return JSON.parse(text.slice(text.indexOf("\n", text.indexOf("\n") + 1) + 1)).program;
}

/** Open (or create) the cache; rejects where the browser has no IndexedDB for this page.
 *  limits: {maxEntries, maxBytes} (defaults LIMITS). */
export async function openProgramCache(limits = {}) {
  if (typeof indexedDB === "undefined") throw new Error("this browser gives the page no IndexedDB");
  const req = indexedDB.open(NAME, VERSION);
  req.onupgradeneeded = (ev) => {
    const db = req.result;
    for (const s of [STORE, METAS, SNAPSHOTS]) if (!db.objectStoreNames.contains(s)) db.createObjectStore(s, { keyPath: "key" });
    if (ev.oldVersion === 1) copyMetas(req.transaction);
  };
  const db = await new Promise((resolve, reject) => {
    let refused = false;
    req.onsuccess = () => (refused ? req.result.close() : resolve(req.result));
    req.onerror = () => reject(req.error);
    // a page of an older tgweb, in another tab, holds the database open at its version: the
    // upgrade would wait for that tab to close, and so would this page's Python
    req.onblocked = () => {
      refused = true;
      reject(new Error("a page of another tgweb version, in another tab, holds the program cache open: " +
        "close that tab to keep compiled programs"));
    };
  });
  db.onversionchange = () => db.close(); // a newer tgweb's page asks for it: this one's cache is off
  return new ProgramCache(db, { ...LIMITS, ...limits });
}

// version 1 kept an entry's text and what is known of it in one record: the latter copied out
function copyMetas(tx) {
  const metas = tx.objectStore(METAS);
  tx.objectStore(STORE).openCursor().onsuccess = (ev) => {
    const c = ev.target.result;
    if (!c) return;
    const { text, ...meta } = c.value;
    metas.put(meta);
    c.continue();
  };
}

// the kinds of entries a trainer's first step runs, in the order it runs them
// (tgweb/progcache.py's kinds: "initial" values, the "step"; "forward" comes after)
const NEEDED_FIRST = ["initial", "step"];

class ProgramCache {
  constructor(db, limits) {
    this.db = db;
    this.limits = limits;
    this.writes = Promise.resolve(); // puts run in the background; list() waits for them
    // the texts recentPrograms read (for the pipelines made ahead): the first get of each
    // answers from here, without a transaction (then it is let go)
    this.read = new Map();
    // the site's shipped Programs (tools/ship_programs.py: KEY.txt each in a folder), when it
    // ships some (ships()): shipped(key) answers a key this cache lacks from there
    this.site = null;
    this.siteKeys = new Set();
    this.siteRead = new Map(); // key -> its text's promise, fetched ahead (fetchShipped)
    // the snapshots' records, read as the cache opens: the first snapshotInfo (a repeat
    // visit's, once the site's manifest gave the key) answers from them, later ones read anew
    this._infos = this._snapshotInfos();
    this._infos.catch(() => {}); // a failed read: snapshotInfo reads again
  }

  // every kept snapshot's record (none or one): not the IndexedDB bytes beside them
  _infoRecords() {
    return this._req("readonly", (s) => s.getAll(IDBKeyRange.bound(INFO, INFO + "\uffff")), SNAPSHOTS);
  }

  async _snapshotInfos() { // by key
    const recs = await this._infoRecords();
    return new Map(recs.map((rec) => [rec.key.slice(INFO.length), { size: rec.size, sha256: rec.sha256, file: rec.file }]));
  }

  // a read resolves with its result; a write once its transaction has committed (a page
  // closed before then loses it: "kept" must mean kept). store: a name (fn gets that object
  // store) or a list of them (fn gets the list), one transaction over them all.
  _req(mode, fn, store = STORE) {
    const names = Array.isArray(store) ? store : [store];
    const tx = this.db.transaction(names, mode);
    const stores = names.map((n) => tx.objectStore(n));
    const result = done(fn(Array.isArray(store) ? stores : stores[0]));
    if (mode !== "readwrite") return result;
    result.catch(() => {}); // the transaction's abort reports it
    return new Promise((resolve, reject) => {
      tx.oncomplete = () => resolve(result);
      tx.onabort = tx.onerror = () => reject(tx.error || new Error("the IndexedDB write was aborted"));
    });
  }

  /** The entry's text, or null; a hit marks the entry used now (in the background). */
  async get(key) {
    let rec = this.read.has(key) ? { text: this.read.get(key) } : null;
    this.read.delete(key);
    try {
      rec = rec || await this._req("readonly", (s) => s.get(key));
    } catch { /* a cache that cannot be read (closed for a newer tgweb's page) misses */ }
    if (!rec) return null;
    const used = Date.now();
    this._write((m) => { // marked used now: its meta record alone rewritten
      const req = m.get(key);
      req.addEventListener("success", () => req.result && m.put({ ...req.result, used }));
      return req;
    }, METAS);
    return rec.text;
  }

  /** The site ships entries: the keys listed (its manifest's), each as dir/KEY.txt. */
  ships(dir, keys) {
    this.site = dir;
    this.siteKeys = new Set(keys);
  }

  /** The site's shipped entry of key (its text, which Python checks as any), or null: what a
   *  first visit on an adapter the site was built for finds (its sample unedited). A text
   *  fetched ahead answers the first ask of it. */
  shipped(key) {
    if (!this.site || !this.siteKeys.has(key)) return Promise.resolve(null);
    const ahead = this.siteRead.get(key);
    this.siteRead.delete(key);
    return ahead || this._fetchShipped(key);
  }

  /** Fetch the site's shipped entries of keys now (the worker: those whose pipelines it asks
   *  for while Python starts), each handed to then(text) as it comes, before Python's ask of
   *  it is answered. Returns how many it asked for. */
  fetchShipped(keys, then) {
    const mine = keys.filter((k) => this.site && this.siteKeys.has(k));
    for (const k of mine) {
      this.siteRead.set(k, this._fetchShipped(k).then((text) => {
        if (text) then(text);
        return text;
      }));
    }
    return mine.length;
  }

  async _fetchShipped(key) {
    try {
      const r = await fetch(versioned(`${key}.txt`, this.site));
      return r.ok ? await r.text() : null;
    } catch {
      return null; // unreachable: compiled instead
    }
  }

  /** Keep text under key; info: {label, kernels, kind}. Then the least recently used
   *  entries over the limits go. */
  put(key, text, info = {}) {
    this.read.delete(key);
    const now = Date.now();
    const meta = { ...info, key, size: text.length, time: now, used: now };
    this._write(([s, m]) => { m.put(meta); return s.put({ key, text }); }, [STORE, METAS]);
    this.writes = this.writes.then(() => this._prune(key)).catch(() => {});
    return this.writes;
  }

  _write(fn, store = STORE) {
    this.writes = this.writes.then(() => this._req("readwrite", fn, store)).catch(() => {});
  }

  /** Remove the least recently used entries (never `keep`) until the limits hold. */
  async _prune(keep) {
    const all = (await this._metas()).sort((a, b) => (b.used || b.time) - (a.used || a.time));
    let n = 0, bytes = 0;
    const gone = all.filter((e) => {
      n += 1;
      bytes += e.size;
      return e.key !== keep && (n > this.limits.maxEntries || bytes > this.limits.maxBytes);
    });
    if (gone.length) await this._req("readwrite", (stores) => this._delete(stores, gone.map((e) => e.key)), [STORE, METAS]);
  }

  // the keys' entries deleted from stores (programs and metas): the last request
  _delete(stores, keys) {
    let last;
    for (const s of stores) for (const k of keys) last = s.delete(k);
    return last;
  }

  /** What is known of every entry: {key, label, kind, size, time, used, kernels}. */
  _metas() {
    return this._req("readonly", (m) => m.getAll(), METAS);
  }

  /** The entries used last, as {program, kind}: within windowMs of the newest use, at most
   *  `most` of them, in the order a trainer's first step needs them: its initial values
   *  (kind "initial", which run first), then the step's and any other Program of kind
   *  "step", then the rest (the programs attached to a trainer, kind "forward": used after
   *  the first step), each group in the order it was used; read without marking them used.
   *  program: the entry's Program, parsed. For gpu.prewarm: a damaged entry is left out here
   *  and refused by Python's checks as ever. */
  async recentPrograms(windowMs = 120000, most = 8) {
    const metas = (await this._metas()).sort((a, b) => (b.used || b.time) - (a.used || a.time));
    const last = metas.length ? metas[0].used || metas[0].time : 0;
    const chosen = metas.filter((m) => (m.used || m.time) >= last - windowMs).slice(0, most).reverse();
    const need = (m) => NEEDED_FIRST.indexOf(m.kind) + 1 || NEEDED_FIRST.length + 1;
    chosen.sort((a, b) => need(a) - need(b)); // stable: each group in the order it was used
    // read together, in one transaction: on a repeat visit this thread is busy starting Python,
    // and each answer waits for a turn of it
    const tx = this.db.transaction([STORE]);
    const recs = await Promise.all(chosen.map((m) => done(tx.objectStore(STORE).get(m.key))));
    const out = [];
    recs.forEach((rec, i) => {
      if (rec) this.read.set(rec.key, rec.text);
      try {
        out.push({ program: entryProgram(rec.text), kind: chosen[i].kind || "" });
      } catch { /* not an entry */ }
    });
    return out;
  }

  async list() {
    await this.writes;
    return (await this._metas()).sort((a, b) => b.time - a.time);
  }

  async remove(key) {
    this.read.delete(key);
    await this.writes;
    await this._req("readwrite", (stores) => this._delete(stores, [key]), [STORE, METAS]);
  }

  /** Clear the Programs and the snapshot. */
  async clear() {
    this.read.clear();
    await this.writes;
    this._infos = null;
    await this._req("readwrite", (stores) => stores.map((s) => s.clear()).pop(), [STORE, METAS, SNAPSHOTS]);
    const dir = await snapshotDir();
    if (dir) await dir.removeEntry(SNAPSHOT_FILE).catch(() => {});
  }

  /** What is kept of the snapshot under key ({size, sha256, file}; sha256 and file are
   *  absent from one kept before snapshots went to files), its bytes unread; null: none. */
  async snapshotInfo(key) {
    const early = this._infos;
    this._infos = null;
    const infos = (early && await early.catch(() => null)) || await this._snapshotInfos();
    return infos.get(key) || null;
  }

  /** The snapshot kept under key (info: snapshotInfo's), read into `into` (a Uint8Array of
   *  its size: Pyodide's memory to be). Resolves to {read: where its bytes were read ("worker":
   *  snapread.mjs, ahead; "here" or "indexeddb"), checked: a promise that rejects where their
   *  SHA-256 is not the kept one}: restorePython restores from the bytes while their hash is
   *  computed (off this thread where they were read ahead) and lets Python run nothing before
   *  it agrees. Rejects saying why (gone, another size); a damaged or unreadable one is removed. */
  async readSnapshot(key, info, into) {
    const drop = async (e) => {
      await this.removeSnapshot(key).catch(() => {});
      throw e;
    };
    let got; // {bytes, sha256: () => a promise of their hash, read}
    let want = info.sha256;
    try {
      if (info.file) {
        const early = ahead;
        ahead = null;
        got = (early && await early) || await readFile();
      } else { // in IndexedDB: this browser gives no file system, or it was kept before
        const rec = await this._req("readonly", (s) => s.get(key), SNAPSHOTS);
        if (!rec) throw new Error("it is gone");
        const bytes = new Uint8Array(rec.bytes);
        got = { bytes, sha256: () => sha256(bytes), read: "indexeddb" };
        want = rec.sha256;
      }
      if (got.bytes.byteLength !== into.byteLength) throw new Error(`it has ${got.bytes.byteLength} bytes, not ${into.byteLength}`);
      into.set(got.bytes);
    } catch (e) {
      return drop(e);
    }
    const checked = got.sha256().then((hash) => {
      times.checked = epochNow();
      if (hash !== want) throw new Error("its checksum does not match");
    }).catch(drop);
    checked.catch(() => {}); // restorePython reports it
    return { read: got.read, checked };
  }

  /** Keep bytes as the one snapshot (under key; others go): in the origin's file system
   *  where the browser gives one, else in IndexedDB; resolves once the record that names
   *  them has committed. */
  async putSnapshot(key, bytes) {
    const info = { key: INFO + key, size: bytes.byteLength, sha256: await sha256(bytes), time: Date.now() };
    const dir = await snapshotDir();
    if (dir) {
      await writeFile(dir, bytes);
      info.file = SNAPSHOT_FILE;
    }
    this._infos = null;
    await this._req("readwrite", (s) => {
      s.clear();
      if (!dir) s.put({ key, bytes, sha256: info.sha256 });
      return s.put(info);
    }, SNAPSHOTS);
  }

  async removeSnapshot(key) {
    this._infos = null;
    await this._req("readwrite", (s) => { s.delete(INFO + key); return s.delete(key); }, SNAPSHOTS);
    const dir = await snapshotDir();
    if (dir) await dir.removeEntry(SNAPSHOT_FILE).catch(() => {}); // none, or open elsewhere
  }

  /** [{key, size, time}] of the snapshot kept (none or one). */
  async snapshots() {
    const all = await this._infoRecords();
    return all.map(({ key, size, time }) => ({ key: key.slice(INFO.length), size, time }));
  }
}

// The snapshot's bytes are a file of the origin's private file system (OPFS) where the
// browser gives one (its record in IndexedDB says which key they are of). It is read once
// the worker has asked for Pyodide's files (readSnapshotAhead), before the worker knows
// which key it wants, by a worker of its own (snapread.mjs: the trainer page's, or the
// worker's), off the thread on which Pyodide's wasm streams in: with a synchronous access handle, 25-70 ms in Chromium
// here. Its bytes come first and Pyodide restores from them while the reader hashes a copy
// (40-50 ms here): Python runs once the hash agrees. Read from IndexedDB once the key was
// known, the same 31.5 MB came 270-330 ms later: each step of that read waited for the
// worker's thread, busy instantiating Pyodide (benchmarks/RESULTS.md). A page opened from
// disk has no such file system: its snapshot stays in IndexedDB.
let ahead = null; // readSnapshotAhead's promise of {bytes, sha256} (null: none)
// when this worker's snapshot was asked for, read, hashed, wanted by Pyodide and restored, in
// ms since the epoch (snapshotTimes); the reader's own marks too where it read the file
const times = {};

/** The marks of this worker's snapshot read and restore so far, in ms since `since` (an
 *  epoch time: the worker's start): asked (readSnapshotAhead), started (the reader worker
 *  ran), read, answered (its bytes here), loader, asm, manifest, key and instance (the
 *  worker's markBoot: Pyodide's loader and its module script imported, the site's manifest
 *  in, the snapshot's key known, the wasm instantiated), info (the kept snapshot's record
 *  read), loading (loadPyodide called), wanted (Pyodide waits for the bytes), filled (they
 *  are in its memory), unpacked (the wheel's files written), hashed (by the reader), loaded
 *  (loadPyodide's Python restored), checked (their hash compared), restored (Python may run). */
export function snapshotTimes(since) {
  return Object.fromEntries(Object.entries(times).map(([k, v]) => [k, Math.round(v - since)]));
}

/** Mark a step of Python's start among snapshotTimes' (the worker's: loader, manifest, key). */
export function markBoot(name) {
  times[name] = epochNow();
}

/** Start reading the kept snapshot's file, if there is one: by a worker of its own (the
 *  page's, where `port` is the promise of a MessagePort to one it started as it loaded,
 *  else one started now), or on this thread where none can start (a browser without
 *  workers in workers). bootPython then restores from these bytes once their record says
 *  they are of its key, and lets Python run once their checksum agrees. (With the hash off
 *  the bytes' way, the reader costs nothing on two cores either: sin's repeat visit 1.29 s
 *  median both ways, SwiftShader.) */
export function readSnapshotAhead(port = null) {
  times.asked = epochNow();
  const reader = port ? port.then((p) => answers(p, () => p.close()))
    : typeof Worker === "function" ? readInWorker() : Promise.reject(new Error("no workers here"));
  // read once: here only where the reader could not start (a file it could not read, or
  // none, as on a first visit, would be no better read again)
  ahead = reader.catch(() => readFile()).catch(() => null);
}

async function readInWorker() { // async: a Worker that cannot be made rejects
  const w = new Worker(versioned("./snapread.mjs", import.meta.url), { type: "module", name: READER });
  const got = answers(w, () => w.terminate());
  w.postMessage(null);
  return got;
}

// a reader's answers (from its Worker, or a port to it; done() ends it): the promise of
// {bytes, sha256: () => the promise of its second answer, read: "worker"}, or of null where
// it found no file it could read; rejects where it did not start
function answers(from, done) {
  return new Promise((resolve, reject) => {
    let settle = null; // the checksum's promise's, once the bytes came
    const failed = (why) => {
      done();
      const e = new Error(why || "the snapshot's reader did not start");
      if (settle) settle.no(e);
      else reject(e);
    };
    from.onmessage = ({ data }) => {
      if (data.failed) return failed(data.failed); // the page's word: its reader did not start
      Object.assign(times, data.times);
      if (data.bytes) { // first the bytes, then their hash
        times.answered = epochNow();
        const hashed = new Promise((ok, no) => { settle = { ok, no }; });
        resolve({ bytes: data.bytes, sha256: () => hashed, read: "worker" });
        return;
      }
      done();
      if (!settle) resolve(null); // no file it could read
      else if (data.error) settle.no(new Error(data.error));
      else settle.ok(data.sha256);
    };
    from.onerror = (ev) => { // a Worker's (a port has none: the page says a reader failed)
      ev.preventDefault();
      failed(ev.message);
    };
  });
}

// the file's {bytes, sha256, read}, read here (hashed when asked: after Pyodide has them)
async function readFile() {
  const bytes = await readSnapshotFile();
  times.read = times.answered = epochNow();
  return { bytes, sha256: () => sha256(bytes), read: "here" };
}

async function writeFile(dir, bytes) {
  const handle = await dir.getFileHandle(SNAPSHOT_FILE, { create: true });
  if (handle.createWritable) { // written beside it, then put in its place: never half written
    const w = await handle.createWritable();
    await w.write(bytes);
    await w.close();
    return;
  }
  const sync = await handle.createSyncAccessHandle(); // a browser without writables (Safari): a worker's
  try {
    sync.truncate(0);
    for (let at = 0; at < bytes.byteLength;) at += sync.write(bytes.subarray(at), { at });
    sync.flush();
  } finally {
    sync.close();
  }
}

/** The snapshot's key: the SHA-256s of the files its memory came from (manifest.json). */
export async function snapshotKey(manifest) {
  const f = manifest.files || {};
  const names = ["pyodide/pyodide.asm.wasm", "pyodide/pyodide.asm.mjs", "pyodide/python_stdlib.zip", manifest.wheel];
  const parts = names.map((n) => `${n}=${f[n] && f[n].sha256}`);
  return sha256(new TextEncoder().encode(["tgweb-snapshot 1", manifest.pyodide, ...parts].join("\n")));
}

/** The snapshot the site was bundled with (manifest.json's "snapshot"), when it is of these
 *  files (key): {size, fetch}, fetch() starting to fetch it and returning a promise of its
 *  bytes, checked against the manifest's size and SHA-256 as they arrive (a damaged one is
 *  refused: memory restored from it could be silently wrong); null where the site has none.
 *  fetchBytes(url) -> Uint8Array. */
export function bundledSnapshot(manifest, key, base, fetchBytes) {
  const snap = manifest.snapshot;
  if (!snap || snap.key !== key) return null;
  const want = (manifest.files || {})[snap.file] || {};
  const fetch = () => {
    const bytes = fetchBytes(new URL(snap.file, base)).then(async (b) => {
      if (b.byteLength !== snap.size) throw new Error(`${snap.file} has ${b.byteLength} bytes, not ${snap.size}`);
      if ((await sha256(b)) !== want.sha256) throw new Error(`${snap.file}'s checksum does not match`);
      return b;
    });
    bytes.catch(() => {}); // bootPython reports it
    return bytes;
  };
  return { size: snap.size, fetch };
}

// The wheel's files written by Python after a plain boot. A restore writes them from its fsInit
// hook instead (restorePython), before Python starts; a Pyodide that makes a snapshot cannot
// take that hook: its serializer refuses the hook's entry in Python's table of JS objects
// ("Unexpected hiwire entry", Pyodide 314.0.8).
function unpackWheel(py, wheel) {
  py.unpackArchive(wheel, "wheel", { extractDir: py.runPython("import sysconfig; sysconfig.get_paths()['purelib']") });
}

const CRC_TABLE = Uint32Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c;
});

function crc32(bytes) {
  let c = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** A zip archive's files (a wheel: stored or deflated, no zip64), each inflated by the
 *  browser's DecompressionStream and checked against its size and CRC-32 as Python's zipfile
 *  would: a promise of [[name, bytes]]. Rejects naming what is wrong. */
export async function unzip(zip) {
  const v = new DataView(zip.buffer, zip.byteOffset, zip.byteLength), utf8 = new TextDecoder();
  let end = zip.byteLength - 22;
  while (end >= 0 && v.getUint32(end, true) !== 0x06054b50) end--;
  if (end < 0) throw new Error("not a zip archive (no end of central directory)");
  const count = v.getUint16(end + 10, true);
  let at = v.getUint32(end + 16, true);
  const files = [];
  for (let i = 0; i < count; i++) {
    if (at + 46 > zip.byteLength || v.getUint32(at, true) !== 0x02014b50) throw new Error(`zip entry ${i}: bad central directory`);
    const method = v.getUint16(at + 10, true), crc = v.getUint32(at + 16, true);
    const packed = v.getUint32(at + 20, true), size = v.getUint32(at + 24, true);
    const nameLen = v.getUint16(at + 28, true), skip = v.getUint16(at + 30, true) + v.getUint16(at + 32, true);
    const name = utf8.decode(zip.subarray(at + 46, at + 46 + nameLen));
    const local = v.getUint32(at + 42, true);
    at += 46 + nameLen + skip;
    if (name.endsWith("/")) continue;
    if (method !== 0 && method !== 8) throw new Error(`${name}: zip method ${method} (stored or deflated only)`);
    const from = local + 30 + v.getUint16(local + 26, true) + v.getUint16(local + 28, true);
    const data = zip.subarray(from, from + packed);
    files.push((async () => {
      const bytes = method === 0 ? data : new Uint8Array(await new Response(
        new Blob([data]).stream().pipeThrough(new DecompressionStream("deflate-raw"))).arrayBuffer());
      if (bytes.byteLength !== size || crc32(bytes) !== crc) throw new Error(`${name}: damaged in the zip archive`);
      return [name, bytes];
    })());
  }
  return Promise.all(files);
}

/** Pyodide restored from a snapshot of `size` bytes that fill(memory) puts into the
 *  Uint8Array it is given, resolving once they are there to {read, checked} (readSnapshot's;
 *  they are read or still on their way): Pyodide needs only the size to instantiate its wasm,
 *  and takes the bytes when it restores its memory, once its file system is set up (its
 *  fsInit hook waits for them there, while the wheel's files are unpacked into
 *  site-packages). Bytes that do not come (unreadable, of another size) make the restore fail
 *  with fill's reason; bytes whose checksum disagrees (`checked`, computed meanwhile) make it
 *  fail after, before any Python of the page's runs: the restored Pyodide is dropped. */
async function restorePython(loadPyodide, { indexURL, size, fill, wheel }) {
  const memory = new Uint8Array(size);
  const filled = fill(memory);
  filled.then(() => { times.filled = epochNow(); }, () => {}); // a failure is reported below
  const unzipped = wheel.then(unzip); // as soon as the wheel is in, while Pyodide starts
  unzipped.catch(() => {}); // reported below
  let failed = null;
  const fsInit = async (FS, { sitePackages }) => {
    times.wanted = epochNow();
    try {
      const [, files] = await Promise.all([filled, unzipped]);
      const dirs = new Set(); // each folder made once (a lookup of every part of its path)
      for (const [name, data] of files) {
        const path = `${sitePackages}/${name}`, dir = path.slice(0, path.lastIndexOf("/"));
        if (!dirs.has(dir)) FS.mkdirTree(dir);
        dirs.add(dir);
        FS.writeFile(path, data, { canOwn: true }); // the unzipped bytes are the file's own
      }
      times.unpacked = epochNow();
    } catch (e) {
      failed = e;
      memory.fill(0); // which Pyodide refuses to restore
    }
  };
  try {
    times.loading = epochNow();
    const pyodide = await loadPyodide({ indexURL, _loadSnapshot: memory, fsInit });
    times.loaded = epochNow();
    const { read, checked } = await filled;
    await checked;
    times.restored = epochNow();
    return { pyodide, read };
  } catch (e) {
    throw failed || e;
  }
}

/** Pyodide with the tgweb wheel installed: restored from a snapshot when there is a good
 *  one, else booted plainly. The snapshot is the one the cache keeps under key, else the
 *  site's (bundled: bundledSnapshot's {size, fetch}; null where the site has none): read from
 *  the cache's file it restores faster than fetched and unzipped again. The wheel's files are
 *  unpacked either way (a snapshot holds memory, not files). A visit with neither leaves it
 *  to makeSnapshot, in another worker after the first step (worker.mjs): making one here
 *  would put the boot in Pyodide's snapshot mode and copy and hash its memory before Python
 *  could run anything. now: make it here all the same (a page opened from disk, whose worker
 *  can start no other). Resolves to {pyodide, snapshot: "restored" | "bundled" | "pending" |
 *  "made" | "off" | "refused: why", read: where a restored snapshot's bytes came from
 *  (readSnapshot's answer, or "site"), later: whether makeSnapshot is still to run, keep:
 *  the site's snapshot's bytes, for the cache}. */
export async function bootPython(loadPyodide, { indexURL, wheel, cache, key, bundled = null, now = false }) {
  let refused = null;
  const info = cache && key ? await cache.snapshotInfo(key).catch(() => null) : null;
  times.info = epochNow();
  const kept = info !== null;
  if (!kept) ahead = null; // bytes of no use: another key's, or a file without its record
  const fetched = !kept && bundled ? bundled.fetch() : null;
  if (kept || fetched) {
    try {
      // read and checked, or fetched, while Pyodide fetches and instantiates its wasm
      const fill = kept ? (memory) => cache.readSnapshot(key, info, memory) : async (memory) => {
        memory.set(await fetched); // checked as it was fetched (bundledSnapshot)
        return { read: "site", checked: null };
      };
      const { pyodide, read } = await restorePython(loadPyodide, { indexURL, size: kept ? info.size : bundled.size, fill, wheel });
      if (!fetched) return { pyodide, snapshot: "restored", read, later: false, keep: null };
      return { pyodide, snapshot: "bundled", read, later: false, keep: cache && key ? await fetched : null };
    } catch (e) { // another Pyodide build's, or not a snapshot: boot afresh
      refused = `refused: ${e.message}`;
      if (kept) await cache.removeSnapshot(key).catch(() => {});
    }
  }
  // where the site has a snapshot, the next visit takes that one (no memory of this visit's is made)
  const make = !!(cache && key) && !bundled;
  const pyodide = await loadPyodide({ indexURL, _makeSnapshot: make && now });
  unpackWheel(pyodide, await wheel);
  if (!(make && now)) return { pyodide, snapshot: refused || (make ? "pending" : "off"), later: make, keep: null };
  cache.putSnapshot(key, memoryAfterImports(pyodide)).catch(() => {}); // storage full: next time
  // While a snapshot can still be made, Python's `js` is Pyodide's path-recording proxy of
  // the globals, on which accessors such as js.self or js.location throw "Illegal
  // invocation". The snapshot is taken: from here on `js` is the globals themselves.
  pyodide.registerJsModule("js", globalThis);
  pyodide.runPython("import sys; sys.modules.pop('js', None)");
  return { pyodide, snapshot: refused || "made", later: false, keep: null };
}

function memoryAfterImports(pyodide) {
  pyodide.runPython(PRELOAD);
  return pyodide.makeMemorySnapshot();
}

/** Boot a Pyodide of its own in snapshot mode, unpack the wheel (bytes, or a promise of
 *  them), import tgweb (PRELOAD) and return its memory: the bytes a later bootPython restores.
 *  This Pyodide is of no use after (its `js` module records paths, on which accessors such as
 *  js.self throw "Illegal invocation"): it runs in a worker apart, or in Node.js when a site is
 *  bundled (tools/site_snapshot.mjs). */
export async function snapshotMemory(loadPyodide, { indexURL, wheel }) {
  const pyodide = await loadPyodide({ indexURL, _makeSnapshot: true });
  unpackWheel(pyodide, await wheel);
  return memoryAfterImports(pyodide);
}

/** snapshotMemory, kept in the cache under key. Resolves to {size, ms}. */
export async function makeSnapshot(loadPyodide, { indexURL, wheel, cache, key }) {
  const t0 = performance.now();
  const bytes = await snapshotMemory(loadPyodide, { indexURL, wheel });
  await cache.putSnapshot(key, bytes);
  return { size: bytes.byteLength, ms: Math.round(performance.now() - t0) };
}
