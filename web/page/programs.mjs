// The trainer page's compiled Programs (web/progcache.mjs): what a repeat visit starts
// from instead of compiling again, each with its size and date, and a Clear button.

import { bytesText } from "./saved.mjs";

const $ = (id) => document.getElementById(id);

/** The "Compiled programs" part of the Saved runs panel (#programs); opts {titles, log}. */
export class ProgramsPanel {
  constructor(cache, opts) {
    this.cache = cache;
    this.opts = opts;
    $("programs").hidden = false;
    $("programs-clear").addEventListener("click", () => this.clear());
    $("programs").addEventListener("toggle", () => this.refresh().catch(() => {}));
  }

  async refresh() {
    const all = await this.cache.list();
    const ul = $("program-list");
    ul.replaceChildren(...all.map((e) => {
      const li = document.createElement("li");
      li.dataset.key = e.key;
      const when = new Date(e.time).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });
      const what = { forward: " (inference)", initial: " (initial values)" }[e.kind] || "";
      li.textContent = `${this.opts.titles[e.label] || e.label || "(unnamed)"}${what}: ${e.kernels ?? "?"} kernels, ` +
        `${bytesText(e.size)}, compiled ${when}`;
      return li;
    }));
    $("programs-count").textContent = `(${all.length}, ${bytesText(all.reduce((n, e) => n + e.size, 0))})`;
    $("programs-clear").disabled = all.length === 0;
    return all;
  }

  async clear() {
    await this.cache.clear();
    this.opts.log("cleared the compiled programs: the next Start of each sample compiles it again");
    await this.refresh();
  }
}
