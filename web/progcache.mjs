// progcache.mjs: the compiled Programs a page keeps (tgweb/progcache.py), in IndexedDB
// (database "tgweb-programs", one record per key), so that a repeat visit skips tracing
// and lowering. The worker reads and writes them for Python; a page lists and clears them:
//
//   const cache = await openProgramCache();  // or tg.programs (tgweb.mjs)
//   await cache.list();     // [{key, label, size, time, kernels}], newest first
//   await cache.remove(key);
//   await cache.clear();
//
// An entry's text carries its own checksum, which Python checks before it uses one: a
// damaged or truncated entry is removed and compiled again, never run.

const NAME = "tgweb-programs", STORE = "programs";

const done = (req) => new Promise((resolve, reject) => {
  req.onsuccess = () => resolve(req.result);
  req.onerror = () => reject(req.error);
});

/** Open (or create) the cache; rejects where the browser has no IndexedDB for this page. */
export async function openProgramCache() {
  if (typeof indexedDB === "undefined") throw new Error("this browser gives the page no IndexedDB");
  const req = indexedDB.open(NAME, 1);
  req.onupgradeneeded = () => req.result.createObjectStore(STORE, { keyPath: "key" });
  return new ProgramCache(await done(req));
}

class ProgramCache {
  constructor(db) {
    this.db = db;
    this.writes = Promise.resolve(); // puts run in the background; list() waits for them
  }

  _req(mode, fn) {
    const tx = this.db.transaction([STORE], mode);
    return done(fn(tx.objectStore(STORE)));
  }

  /** The entry's text, or null. */
  async get(key) {
    const rec = await this._req("readonly", (s) => s.get(key));
    return rec ? rec.text : null;
  }

  /** Keep text under key; info: {label, kernels}. */
  put(key, text, info = {}) {
    const rec = { ...info, key, text, size: text.length, time: Date.now() };
    this.writes = this.writes.then(() => this._req("readwrite", (s) => s.put(rec))).catch(() => {});
    return this.writes;
  }

  async list() {
    await this.writes;
    const all = [];
    await new Promise((resolve, reject) => {
      const req = this.db.transaction([STORE]).objectStore(STORE).openCursor();
      req.onerror = () => reject(req.error);
      req.onsuccess = () => {
        const c = req.result;
        if (!c) return resolve();
        const { text, ...meta } = c.value; // the list leaves the texts where they are
        all.push(meta);
        c.continue();
      };
    });
    return all.sort((a, b) => b.time - a.time);
  }

  async remove(key) {
    await this.writes;
    await this._req("readwrite", (s) => s.delete(key));
  }

  async clear() {
    await this.writes;
    await this._req("readwrite", (s) => s.clear());
  }
}
