// snapread.mjs: a worker of tgweb's worker that reads the kept Pyodide snapshot's file and
// hashes it (progcache.mjs's readSnapshotAhead starts it). Both take the thread they run
// on for tens of milliseconds (31.5 MB read, then SHA-256, whose call in Chromium does its
// work before it returns); on tgweb's worker they held up Pyodide's wasm, which streams in
// on that thread at the same time. Answers {bytes, sha256} (the bytes moved, not copied)
// or {error}.

import { readSnapshotFile, sha256 } from "./progcache.mjs";

self.onmessage = async () => {
  try {
    const bytes = await readSnapshotFile();
    self.postMessage({ bytes, sha256: await sha256(bytes) }, [bytes.buffer]);
  } catch (e) {
    self.postMessage({ error: String((e && e.message) || e) });
  }
};
