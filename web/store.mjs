// store.mjs: what a page keeps in the browser's storage (IndexedDB, one database per
// origin and name): edited sources, and saved training runs (the checkpoints that
// tgweb.worker.autosave sends). Kept until deleted here or the site's data is cleared.
//
//   const store = await openStore();          // or start({autosave: true}) and tg.store
//   await store.keepSource("sin", text, original);  // null after restoring the original
//   await store.source("sin");                // the kept text, or null
//   await store.runs();                       // [{key, step, calls, time, size, ...}], newest first
//   const run = await store.loadRun("sin");   // {bytes, source, losses, ...}; CorruptRun if damaged
//   await store.deleteRun("sin");
//   await store.usage();                      // {usage, quota, persisted} in bytes
//
// A save is atomic: the new entry is written first, then the run's pointer switches to it
// in a second transaction (and the old entry goes). A crash between the two leaves the
// old run whole; the orphan entry is removed at the next open. The pointer holds the
// entry's SHA-256, so a damaged or missing entry is refused (and deleted), never loaded.

const VERSION = 1;
const SOURCES = "sources", RUNS = "runs", ENTRIES = "entries";

/** A saved run whose entry does not match its checksum (or is missing); it was deleted. */
export class CorruptRun extends Error {
  constructor(key, why) {
    super(`the saved run "${key}" is damaged (${why}); it was discarded`);
    this.name = "CorruptRun";
    this.key = key;
  }
}

const done = (req) => new Promise((resolve, reject) => {
  req.onsuccess = () => resolve(req.result);
  req.onerror = () => reject(req.error);
});

const committed = (tx) => new Promise((resolve, reject) => {
  tx.oncomplete = () => resolve();
  tx.onerror = () => reject(tx.error);
  tx.onabort = () => reject(tx.error || new DOMException("the transaction was aborted", "AbortError"));
});

/** Open (or create) the store; rejects where the browser has no IndexedDB for this page. */
export async function openStore(name = "tgweb") {
  if (typeof indexedDB === "undefined") throw new Error("this browser gives the page no IndexedDB");
  const req = indexedDB.open(name, VERSION);
  req.onupgradeneeded = () => {
    const db = req.result;
    for (const s of [SOURCES, RUNS]) if (!db.objectStoreNames.contains(s)) db.createObjectStore(s, { keyPath: "key" });
    if (!db.objectStoreNames.contains(ENTRIES)) db.createObjectStore(ENTRIES, { keyPath: "id" });
  };
  const db = await done(req);
  db.onversionchange = () => db.close(); // a newer tgweb's page upgrades it: this one lets go
  const store = new Store(db);
  await store.dropOrphans();
  return store;
}

/** SHA-256 (hex) of a run's entry: the checkpoint, the source and the loss history. */
export async function checksum(entry) {
  const parts = [entry.bytes, "\0", entry.source || "", "\0", JSON.stringify(entry.losses || [])];
  const data = await new Blob(parts).arrayBuffer();
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", data));
  return Array.from(hash, (b) => b.toString(16).padStart(2, "0")).join("");
}

class Store {
  constructor(db) {
    this.db = db;
    this.queue = Promise.resolve(); // saves one after another, in the order they came
  }

  async _tx(stores, mode, fn) {
    const tx = this.db.transaction(stores, mode, mode === "readwrite" ? { durability: "strict" } : undefined);
    const result = fn(...stores.map((s) => tx.objectStore(s)));
    await committed(tx);
    return result instanceof IDBRequest ? result.result : result;
  }

  async source(key) {
    const rec = await this._tx([SOURCES], "readonly", (s) => s.get(key));
    return rec ? rec.text : null;
  }

  /** Keep text as key's source; text equal to original (or null) forgets it. */
  keepSource(key, text, original = null) {
    return this._tx([SOURCES], "readwrite", (s) =>
      text == null || text === original ? s.delete(key) : s.put({ key, text, time: Date.now() }));
  }

  async runs() {
    const all = await this._tx([RUNS], "readonly", (s) => s.getAll());
    return all.sort((a, b) => b.time - a.time);
  }

  /** Save a run under key: run.bytes (the checkpoint) plus anything else worth keeping
   *  (source, losses, step, ...). Resolves to the new pointer. */
  saveRun(key, run) {
    const next = this.queue.then(() => this._save(key, run));
    this.queue = next.catch(() => {});
    return next;
  }

  async _save(key, run) {
    const { bytes, source = "", losses = [], ...info } = run;
    const id = `${key}@${Date.now()}.${Math.random().toString(36).slice(2, 8)}`;
    const entry = { id, bytes, source, losses };
    const pointer = { ...info, key, id, time: Date.now(), size: bytes.byteLength, sha256: await checksum(entry) };
    await this._tx([ENTRIES], "readwrite", (e) => e.put(entry));
    await this._tx([RUNS, ENTRIES], "readwrite", (r, e) => {
      r.get(key).onsuccess = (ev) => {
        const old = ev.target.result;
        r.put(pointer);
        if (old && old.id !== id) e.delete(old.id);
      };
    });
    return pointer;
  }

  /** The run saved under key, checked against its checksum; a damaged one is deleted and
   *  CorruptRun thrown. */
  async loadRun(key) {
    const [pointer, entry] = await this._tx([RUNS, ENTRIES], "readonly", (r, e) => {
      const out = [];
      r.get(key).onsuccess = (ev) => {
        out[0] = ev.target.result;
        if (out[0]) e.get(out[0].id).onsuccess = (ev2) => { out[1] = ev2.target.result; };
      };
      return out;
    });
    if (!pointer) throw new Error(`no saved run "${key}"`);
    const why = !entry ? "its data is missing" : (await checksum(entry)) !== pointer.sha256 ? "checksum mismatch" : null;
    if (why) {
      await this.deleteRun(key);
      throw new CorruptRun(key, why);
    }
    return { ...pointer, bytes: new Uint8Array(entry.bytes), source: entry.source, losses: entry.losses };
  }

  async deleteRun(key) {
    await this._tx([RUNS, ENTRIES], "readwrite", (r, e) => {
      r.get(key).onsuccess = (ev) => {
        if (ev.target.result) e.delete(ev.target.result.id);
        r.delete(key);
      };
    });
  }

  /** Entries no pointer names: left by a crash between a save's two steps. */
  async dropOrphans() {
    await this._tx([RUNS, ENTRIES], "readwrite", (r, e) => {
      r.getAll().onsuccess = (ev) => {
        const live = new Set(ev.target.result.map((p) => p.id));
        e.getAllKeys().onsuccess = (ev2) => { for (const id of ev2.target.result) if (!live.has(id)) e.delete(id); };
      };
    });
  }

  /** The origin's storage: {usage, quota} in bytes (navigator.storage.estimate()) and
   *  whether it is persistent (not evicted under storage pressure). */
  async usage() {
    const st = navigator.storage;
    if (!st || !st.estimate) return { usage: null, quota: null, persisted: false };
    const [{ usage, quota }, persisted] = await Promise.all([st.estimate(), st.persisted ? st.persisted() : false]);
    return { usage, quota, persisted };
  }

  /** Ask the browser to keep this origin's storage (navigator.storage.persist()). */
  async persist() {
    const st = navigator.storage;
    try {
      return !!(st && st.persist && (await st.persist()));
    } catch {
      return false; // some contexts (a page opened from disk) refuse the question itself
    }
  }
}
