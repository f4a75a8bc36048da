// The trainer page's saved runs (app.mjs keeps them through store.mjs): a Resume and a
// Delete button for each, the autosave's last word, and the space the origin uses.

const $ = (id) => document.getElementById(id);

/** The "Saved runs" panel of index.html (#saved): opts {app, log, every, titles, onResume}. */
export class SavedRuns {
  constructor(store, opts) {
    this.store = store;
    this.opts = opts;
    this.ready = false;
    $("saved").hidden = false;
  }

  async refresh() {
    this.opts.app.runs = await this.store.runs();
    this.render(this.ready);
    $("storage").textContent = usageText(await this.store.usage());
  }

  /** ready: whether Resume may be pressed now (Python is up, nothing else runs). */
  render(ready) {
    this.ready = ready;
    const runs = this.opts.app.runs;
    $("no-runs").hidden = runs.length > 0;
    renderRuns($("runs"), runs, { ready, titles: this.opts.titles, onResume: this.opts.onResume,
      onDelete: (key) => this.delete(key) });
  }

  async delete(key) {
    await this.store.deleteRun(key);
    this.opts.log(`deleted the saved run of ${key}`);
    await this.refresh();
  }

  /** tgweb.mjs's "autosaved" event: the run's new pointer. */
  saved(p) {
    this.opts.app.saves.push(p);
    this.say(`Autosaved ${this.opts.titles[p.sample] || p.sample} at step ${p.step} ` +
      `(${new Date(p.time).toLocaleTimeString()}; every ${this.opts.every} s while training).`, "ok");
    this.refresh().catch(() => {});
  }

  /** tgweb.mjs's "autosave-error" event: said on the page and in the log; training goes on. */
  failed(e) {
    const text = `Autosave failed (${e.name}: ${e.message}); training goes on.` +
      (e.name === "QuotaExceededError" ? " The storage is full: delete saved runs to make room." : "");
    this.opts.app.saveErrors = (this.opts.app.saveErrors || 0) + 1;
    this.say(text, "error");
    this.opts.log(text, "err");
  }

  say(text, kind) {
    $("autosave").textContent = text;
    $("autosave").dataset.kind = kind;
  }
}

/** Seconds between autosaves: ?autosave=N in the page's URL (0 or "off": none), else 30. */
export function autosaveSeconds(search = location.search) {
  const v = new URLSearchParams(search).get("autosave");
  if (v == null || v === "") return 30;
  if (v === "off") return 0;
  const n = Number(v);
  return Number.isFinite(n) && n >= 0 ? n : 30;
}

const when = (ms) => new Date(ms).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" });

export function bytesText(n) {
  if (n == null) return "?";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(i && n < 10 ? 1 : 0)} ${units[i]}`;
}

/** The list of saved runs in ul: "Resume <sample> from step N (saved <time>)" and Delete. */
export function renderRuns(ul, runs, { ready, titles, onResume, onDelete }) {
  ul.replaceChildren();
  for (const r of runs) {
    const li = document.createElement("li");
    li.dataset.run = r.key;
    const resume = document.createElement("button");
    resume.type = "button";
    resume.className = "primary";
    resume.id = `resume-${r.key}`;
    resume.disabled = !ready;
    const left = r.target > r.calls ? `, ${r.target - r.calls} steps to go` : "";
    resume.textContent = `Resume ${titles[r.sample] || r.sample} from step ${r.step} (saved ${when(r.time)}${left})`;
    resume.addEventListener("click", () => onResume(r.key));
    const del = document.createElement("button");
    del.type = "button";
    del.id = `delete-${r.key}`;
    del.textContent = "Delete";
    del.setAttribute("aria-label", `Delete the saved run of ${r.sample}`);
    del.addEventListener("click", () => onDelete(r.key));
    const size = document.createElement("span");
    size.className = "muted";
    size.textContent = bytesText(r.size);
    li.append(resume, " ", size, " ", del);
    ul.append(li);
  }
}

/** "Storage: X used of Y, persistent | may be cleared ..." from store.usage(). */
export function usageText({ usage, quota, persisted }) {
  if (usage == null) return "Storage: this browser does not say how much space the page uses.";
  return `Storage: ${bytesText(usage)} used of ${bytesText(quota)}; ` +
    (persisted ? "persistent (kept until you delete it)." :
      "best-effort (the browser may clear it when the disk runs short).");
}
