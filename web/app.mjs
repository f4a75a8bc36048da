// The trainer page (index.html): a gallery of the samples in page/gallery.mjs. Each sample's Python
// source (page/samples/*.py) is editable; Start runs it in its own namespace through
// page/harness.py (compiling the trainer) and then calls its train(steps), which emits
// "metric" events (the loss) and "view" events (the sample's own view) back here.
import { start } from "./tgweb.mjs";
import { drawLossChart, fmt } from "./page/charts.mjs";
import { SAMPLES } from "./page/gallery.mjs";
import { lineBoxes, renderGutter as drawGutter } from "./page/gutter.mjs";
import { SavedRuns, autosaveSeconds } from "./page/saved.mjs";
import { Phases } from "./page/phases.mjs";
import { ProgramsPanel } from "./page/programs.mjs";
import { openProgramCache } from "./progcache.mjs";
import { renderFigures as renderViewFigures, renderParts } from "./page/view.mjs";
import { CorruptRun, openStore } from "./store.mjs";
import { versioned } from "./versioned.mjs";


const $ = (id) => document.getElementById(id);
const state = Object.fromEntries(SAMPLES.map((s) => [s.name, {
  ...s, loaded: null, original: "", source: "", compiled: null, losses: [], view: null, info: null, error: null,
  stepsWanted: s.steps, rate: null,
}]));
let current = SAMPLES[0].name;
let tg = null;
let running = null;   // {name, promise} while a sample trains
let busy = false;     // a non-training call (compile, reset, save, load) is in flight
let escPressed = false;
let store = null;     // store.mjs: kept sources and saved runs (null: the browser gives none)
let saved = null;     // the saved runs' panel (page/saved.mjs)
let programs = null;  // the compiled programs' panel (page/programs.mjs)
const AUTOSAVE_S = autosaveSeconds();
// waits: each wait the status line counted (start-up, a Start to its first loss), ended
const app = { state, ready: false, errors: [], saves: [], runs: [], startup: [], waits: [] };
window.app = app;

// ------------------------------------------------------------------ status, log, errors

function setStatus(text, kind = "") {
  const el = $("status");
  el.textContent = text;
  el.dataset.kind = kind;
}

// what the page waits for, ticking in the status line (page/phases.mjs)
const phases = new Phases(setStatus);
const pageClock = (epochMs) => (epochMs != null ? epochMs - performance.timeOrigin : undefined);

/** The wait is over: kept in app.waits; returns it ({summary, ms, phases}). */
function endWait(what, extra = {}) {
  if (!phases.active) return null;
  const w = { what, ...extra, ...phases.end() };
  app.waits.push(w);
  return w;
}

function log(text, cls = "") {
  const el = $("log");
  const line = document.createElement("span");
  if (cls) line.className = cls;
  line.textContent = text.endsWith("\n") ? text : text + "\n";
  el.append(line);
  while (el.childNodes.length > 500) el.firstChild.remove();
  el.scrollTop = el.scrollHeight;
}

/** {type, message, line, traceback} from a tgweb error; line is in filename. */
function parseError(e, filename) {
  const tb = String(e.traceback || e.message || e);
  const lines = tb.replace(/\s+$/, "").split("\n");
  let i = -1;
  lines.forEach((l, k) => { if (/^\s*File "/.test(l)) i = k; });
  let rest = lines;
  if (i >= 0) {
    let k = i + 1;
    while (k < lines.length && /^\s{4}/.test(lines[k])) k++;
    rest = lines.slice(k);
  }
  let text = rest.join("\n").trim() || lines[lines.length - 1] || String(e);
  let type = e.pyType || e.name || "Error";
  const m = /^([A-Za-z_][\w.]*): ([\s\S]*)$/.exec(text);
  if (m) { type = m[1]; text = m[2]; }
  let line = null;
  const re = new RegExp(`File "${filename.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}", line (\\d+)`, "g");
  for (let mm; (mm = re.exec(tb));) line = Number(mm[1]);
  return { type, message: text, line, traceback: tb, filename };
}

function showError(s) {
  const err = s.error;
  $("error").hidden = !err;
  markGutter(err && err.line);
  if (!err) return;
  $("error-type").textContent = err.type + ":";
  $("error-text").textContent = err.message;
  $("error-where").hidden = err.line == null;
  $("error-file").textContent = err.filename;
  $("error-line-no").textContent = err.line ?? "";
  $("error-trace").textContent = err.traceback;
}

function fail(s, e, what) {
  if (e && e.stopped) return;
  s.error = parseError(e, `${s.name}.py`);
  const where = s.error.line != null ? ` (line ${s.error.line})` : "";
  setStatus(`${s.title}: ${what} failed — ${s.error.type}${where}`, "error");
  log(s.error.traceback, "err");
  if (s.name === current) showError(s);
  renderGallery();
}

// ------------------------------------------------------------------ editor

function renderGutter() {
  const err = state[current].error;
  drawGutter($("gutter"), $("source"), err && err.line);
}

function markGutter() { renderGutter(); }

function goToLine(line) {
  const ta = $("source");
  const lines = ta.value.split("\n");
  let pos = 0;
  for (let i = 0; i < line - 1 && i < lines.length; i++) pos += lines[i].length + 1;
  ta.focus();
  ta.setSelectionRange(pos, pos + (lines[line - 1] || "").length);
  const [top] = lineBoxes(ta)[line - 1] || [0];
  ta.scrollTop = Math.max(0, top - 3 * (parseFloat(getComputedStyle(ta).lineHeight) || 18));
}

function setupEditor() {
  const ta = $("source");
  ta.addEventListener("input", () => {
    state[current].source = ta.value;
    keepEdit(state[current]);
    renderGutter();
    renderGallery();
  });
  ta.addEventListener("scroll", () => { $("gutter").scrollTop = ta.scrollTop; });
  ta.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") { escPressed = true; return; }
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      ev.preventDefault();
      trainSample(current);
      return;
    }
    if (ev.key === "Tab" && !ev.shiftKey && !escPressed && !ev.ctrlKey && !ev.altKey) {
      ev.preventDefault();
      const a = ta.selectionStart, b = ta.selectionEnd;
      ta.setRangeText("    ", a, b, "end");
      ta.dispatchEvent(new Event("input"));
    }
    escPressed = false;
  });
  $("error-line").addEventListener("click", () => {
    const err = state[current].error;
    if (err && err.line) goToLine(err.line);
  });
  $("revert").addEventListener("click", () => {
    const s = state[current];
    s.source = s.original;
    keepEdit(s);
    ta.value = s.source;
    renderGutter();
    renderGallery();
  });
}

/** Keep s's edited source in the browser's storage (a moment after the last keystroke). */
function keepEdit(s) {
  if (!store || !s.loaded) return;
  clearTimeout(s.keepTimer);
  s.keepTimer = setTimeout(() => {
    store.keepSource(s.name, s.source, s.original).then(
      () => { app.kept = (app.kept || 0) + 1; },
      (e) => log(`could not keep the edit of ${s.name}.py: ${e.message}`, "err"));
  }, 300);
}

// ------------------------------------------------------------------ the sample's view

function renderView() {
  const s = state[current];
  const v = s.view;
  const figs = $("view-figures"), body = $("view-body");
  figs.replaceChildren();
  body.replaceChildren();
  if (!v) {
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = s.compiled ? "No view yet." : "Press Start to compile and train.";
    body.append(p);
    return;
  }
  renderViewFigures(figs, v);
  if (s.viewer) s.viewer.render(body, v, viewContext(s));
  else renderParts(body, v);
}

/** What a sample's own view module gets: call(fn, kwargs) runs fn(**kwargs) from the
 * sample's namespace (after Start) and resolves to its JSON result; setView(v) shows a
 * new view; parts(body, v) draws the shared parts; running tells whether it trains. */
function viewContext(s) {
  return {
    call: (fn, kwargs = {}) => call("page_call(PAGE_NAME, PAGE_FN, PAGE_ARGS)",
      { PAGE_NAME: s.name, PAGE_FN: fn, PAGE_ARGS: kwargs }),
    setView: (v) => { s.view = v; if (s.name === current) renderView(); },
    parts: renderParts,
    get running() { return !!(running && running.name === s.name); },
  };
}

// ------------------------------------------------------------------ figures and gallery

function renderFigures() {
  const s = state[current];
  const last = s.losses[s.losses.length - 1];
  $("fig-step").textContent = last ? String(last[0]) : String(s.info ? s.info.steps : 0);
  $("fig-loss").textContent = last ? fmt(last[1]) : "–";
  $("fig-rate").textContent = s.rate != null ? s.rate.toFixed(s.rate < 10 ? 1 : 0) : "–";
  $("fig-params").textContent = s.info ? s.info.params.toLocaleString("en-US") : "–";
  $("fig-compile").textContent = s.info && s.info.compile_s != null ? `${s.info.compile_s.toFixed(2)} s` : "–";
}

function renderGallery() {
  const ul = $("gallery");
  for (const s of Object.values(state)) {
    let li = ul.querySelector(`[data-sample="${s.name}"]`);
    if (!li) {
      li = document.createElement("li");
      li.dataset.sample = s.name;
      const b = document.createElement("button");
      b.type = "button";
      b.id = `pick-${s.name}`;
      b.innerHTML = `<span class="g-title"></span><span class="g-kind"></span><span class="g-state"></span>`;
      b.querySelector(".g-title").textContent = s.title;
      b.querySelector(".g-kind").textContent = s.kind;
      b.addEventListener("click", () => select(s.name));
      li.append(b);
      ul.append(li);
    }
    const b = li.querySelector("button");
    b.setAttribute("aria-pressed", String(s.name === current));
    const last = s.losses[s.losses.length - 1];
    let st = running && running.name === s.name ? "training" : s.error ? "error" : last ? `step ${last[0]}` : "not started";
    if (s.source !== s.original) st += " · edited";
    b.querySelector(".g-state").textContent = st;
    b.dataset.state = running && running.name === s.name ? "running" : s.error ? "error" : "";
  }
}

function renderControls() {
  const s = state[current];
  const mine = running && running.name === current;
  const ok = !!tg && !tg.dead;
  $("start").disabled = !ok || mine || busy;
  $("stop").disabled = !mine;
  $("reset").disabled = !ok || busy || (!s.compiled && !s.losses.length);
  $("download").disabled = !ok || busy || !!running || !s.compiled;
  $("load").disabled = !ok || busy || !!running;
  if (saved) saved.render(ok && !busy && !running);
  document.body.dataset.state = !tg ? "starting" : running ? "running" : busy ? "busy" : "ready";
}

function renderAll() {
  const s = state[current];
  $("sample-title").textContent = s.title;
  $("sample-blurb").textContent = s.blurb;
  if ($("source").value !== s.source) $("source").value = s.source;
  $("steps").value = s.stepsWanted;
  renderGutter();
  showError(s);
  renderFigures();
  drawLossChart($("chart"), state[current].losses);
  renderView();
  renderGallery();
  renderControls();
}

function select(name) {
  current = name;
  history.replaceState(null, "", `#${name}`);
  loadSource(state[name]).catch(() => {});  // the status says why
  renderAll();
}

async function fetchText(path) {
  // opened from disk or as the single file: no fetch there; disk-loader.js holds the files
  if (globalThis.tgwebDisk && globalThis.tgwebDisk.files) return globalThis.tgwebDisk.text(path);
  const r = await fetch(versioned(path, import.meta.url));
  if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
  return r.text();
}

/** The sample's source, fetched once, when the sample is first opened. */
function loadSource(s) {
  s.loaded ||= fetchText(`page/samples/${s.name}.py`).then(async (text) => {
    const kept = store ? await store.source(s.name).catch(() => null) : null;
    s.original = text;
    s.source = kept ?? text;
    if (s.name === current) renderAll();
  }, (e) => {
    s.loaded = null;
    setStatus(`${s.title}: could not load its source (${e.message})`, "error");
    throw e;
  });
  return s.loaded;
}

// ------------------------------------------------------------------ Python calls

async function call(expr, globals = {}) {
  return tg.run(expr, { filename: "<page>", globals });
}

// show: false where training follows at once (Start): the view waits for the first step
async function ensureCompiled(s, show = true) {
  if (s.compiled === s.source) return false;
  s.compiled = null;  // the old namespace is gone once the new source starts running
  if (s.error) { // an error shown goes (the gutter's numbers are laid out again: not for nothing)
    s.error = null;
    showError(s);
  }
  const what = "compiling the model (Python: trace, gradients, WGSL)";
  if (phases.active) phases.next(what);
  else setStatus(`${s.title}: ${what}…`, "busy");
  const t0 = performance.now();
  s.info = await call("page_exec(PAGE_NAME, PAGE_SOURCE, PAGE_FILE, PAGE_SHOW)",
    { PAGE_NAME: s.name, PAGE_SOURCE: s.source, PAGE_FILE: `${s.name}.py`, PAGE_SHOW: show });
  s.info.wall_s = (performance.now() - t0) / 1000;
  s.compiled = s.source;
  s.losses = [];
  s.rate = null;
  const cached = { hit: ", from the compiled programs", shipped: ", from the programs the site ships" }[s.info.cache] || "";
  log(`${s.title}: compiled in ${s.info.compile_s.toFixed(2)} s (${s.info.kernels ?? "?"} kernels, ` +
    `${s.info.params} parameters${cached})`);
  if (programs) programs.refresh().catch(() => {});
  return true;
}

async function stopRunning() {
  if (!running) return;
  tg.stop();
  try { await running.promise; } catch { /* reported by trainSample */ }
}

async function trainSample(name, only = null) {
  const s = state[name];
  if (!tg || (running && running.name === name) || busy) return;
  await stopRunning();
  const steps = only ?? Math.max(1, Math.min(100000, parseInt($("steps").value, 10) || s.steps));
  if (name === current && only == null) s.stepsWanted = steps;
  const job = { name, t0: performance.now(), startStep: null };
  running = job;
  job.promise = (async () => {
    renderGallery(); renderControls();
    try {
      await loadSource(s);
      // the status line says what Start waits for until the first loss (onMetric)
      job.steps = steps;
      phases.begin(`${s.title}: `, s.compiled === s.source ? "running the first step" : "compiling the model");
      const fresh = await ensureCompiled(s, false);
      phases.next("running the first step");
      s.rateMarks = [];
      job.target = (s.info.calls || 0) + steps;  // the step the run ends at: a resume goes on to it
      const training = call("page_train(PAGE_NAME, PAGE_STEPS, PAGE_AUTOSAVE)",
        { PAGE_NAME: name, PAGE_STEPS: steps, PAGE_AUTOSAVE: store ? AUTOSAVE_S : 0 });
      if (fresh && name === current) renderAll(); // while the worker trains: the first step is not held
      const r = await training;
      endWait("start", { sample: name, loss: null });  // a train() that reported no loss
      s.info = { ...s.info, ...r };
      const rate = r.ran > 0 && r.seconds > 0 ? r.ran / r.seconds : null;
      setStatus(`${s.title}: ${r.stopped ? "stopped" : "done"} at step ${r.steps}` +
        (rate ? ` (${r.ran} steps, ${rate.toFixed(1)} steps/s)` : ""), r.stopped ? "" : "ok");
      return r;
    } catch (e) {
      endWait("start", { sample: name, loss: null, failed: true });
      if (e.stopped) {
        setStatus(`${s.title}: stopped`);
      } else {
        fail(s, e, s.compiled === s.source ? "training" : "compiling");
      }
      return null;
    } finally {
      if (running === job) running = null;
      renderGallery(); renderControls();
      if (name === current) renderFigures();
    }
  })();
  return job.promise;
}

async function withBusy(label, fn) {
  const s = state[current];
  await stopRunning();
  busy = true;
  renderControls();
  try {
    return await fn(s);
  } catch (e) {
    fail(s, e, label);
  } finally {
    busy = false;
    renderControls();
  }
}

async function resetSample() {
  await withBusy("reset", async (s) => {
    s.losses = [];
    s.rate = null;
    s.error = null;
    if (s.compiled) {
      s.info = await call("page_reset(PAGE_NAME)", { PAGE_NAME: s.name });
      setStatus(`${s.title}: reset to the initial parameters (seeded)`);
    } else {
      s.view = null;
    }
    renderAll();
  });
}

async function downloadParams() {
  await withBusy("download", async (s) => {
    const b64 = await call("page_save(PAGE_NAME)", { PAGE_NAME: s.name });
    const bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    const steps = s.info ? s.info.steps : 0;
    const url = URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = `${s.name}-step${steps}.safetensors`;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    setStatus(`${s.title}: saved ${a.download} (${(bytes.length / 1024).toFixed(0)} KiB)`, "ok");
  });
}

async function loadParams(file) {
  await withBusy("loading parameters", async (s) => {
    const data = new Uint8Array(await file.arrayBuffer());
    const fresh = await ensureCompiled(s);
    if (fresh) renderAll();
    const r = await call("page_load(PAGE_NAME, PAGE_DATA)", { PAGE_NAME: s.name, PAGE_DATA: data });
    s.info = { ...s.info, ...r };
    s.error = null;
    showError(s);
    setStatus(`${s.title}: loaded ${file.name} (${r.tensors} tensors, step ${r.steps}` +
      `${r.optimizer_state ? ", with optimizer state" : ", parameters only"})`, "ok");
    renderAll();
  });
}

// ------------------------------------------------------------------ saved runs (store.mjs)

/** What the page keeps with each autosave besides the checkpoint (tgweb.mjs adds it). */
function saveDetails(a) {
  const s = state[a.name];
  return { sample: a.name, source: s.compiled || s.source, losses: s.losses.filter(([st]) => st <= a.step),
    target: running && running.name === a.name ? running.target : a.calls };
}

/** Resume a saved run: its source, its checkpoint, its losses; then train on to where the
 *  run was heading. A damaged entry is refused (and deleted) with a message. */
async function resumeRun(key) {
  let run;
  try {
    run = await store.loadRun(key);
  } catch (e) {
    const msg = e instanceof CorruptRun ? e.message : `could not read the saved run ${key}: ${e.message}`;
    setStatus(msg, "error");
    log(msg, "err");
    await saved.refresh();
    return;
  }
  if (!state[run.sample]) return setStatus(`the saved run is of an unknown sample ${run.sample}`, "error");
  select(run.sample);
  const done = await withBusy("resuming", async (s) => {
    await loadSource(s);
    s.source = run.source;
    keepEdit(s);
    await ensureCompiled(s);
    const r = await call("page_resume(PAGE_NAME, PAGE_DATA)", { PAGE_NAME: s.name, PAGE_DATA: run.bytes });
    s.info = { ...s.info, ...r };
    s.losses = run.losses;
    s.error = null;
    setStatus(`${s.title}: resumed at step ${r.steps}`, "ok");
    renderAll();
    return true;
  });
  if (done && run.target > run.calls) await trainSample(run.sample, run.target - run.calls);
}

// ------------------------------------------------------------------ events from Python

function onMetric(m) {
  const name = running ? running.name : current;
  const s = state[name];
  if (m.name !== "loss" || m.value == null) return;
  s.losses.push([m.step, m.value]);
  if (running && running.name === name && phases.active) firstLoss(s, m);
  const now = performance.now();
  s.rateMarks = s.rateMarks || [];
  s.rateMarks.push([now, m.step]);
  while (s.rateMarks.length > 2 && now - s.rateMarks[0][0] > 3000) s.rateMarks.shift();
  const [t0, st0] = s.rateMarks[0];
  if (now - t0 > 250 && m.step > st0) s.rate = (m.step - st0) / ((now - t0) / 1000);
  if (name === current) scheduleDraw();
}

/** Start's wait is over: the first loss, now, with what the wait was made of. */
function firstLoss(s, m) {
  const w = endWait("start", { sample: s.name, loss: m.value, step: m.step });
  setStatus(`${s.title}: first loss ${fmt(m.value)} ${(w.ms / 1000).toFixed(1)} s after Start (${w.summary}); ` +
    `training ${running.steps} steps…`, "busy");
  renderFigures();  // the figures show it at once, not at the next frame
}

let drawPending = false;
function scheduleDraw() {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => {
    drawPending = false;
    drawLossChart($("chart"), state[current].losses);
    renderFigures();
    renderGallery();
  });
}

function onView(v) {
  const name = running ? running.name : current;
  state[name].view = v;
  if (name === current) renderView();
}

// ------------------------------------------------------------------ start-up

async function openStorage() {
  try {
    store = await openStore("tgweb-page");
  } catch (e) {
    log(`This browser keeps nothing for the page (${e.message}): edits and runs are not saved.`, "err");
    return;
  }
  saved = new SavedRuns(store, { app, log, every: AUTOSAVE_S, onResume: resumeRun,
    titles: Object.fromEntries(SAMPLES.map((x) => [x.name, x.title])) });
  store.persist().then((granted) => { app.persisted = granted; saved.refresh().catch(() => {}); });
  await saved.refresh();
  try {
    programs = new ProgramsPanel(await openProgramCache(), { log, titles: saved.opts.titles });
    app.programs = programs;
    programs.refresh().catch(() => {});
  } catch (e) {
    log(`compiled programs are not kept (${e.message})`, "err");
  }
}

async function boot() {
  setupEditor();
  const want = location.hash.slice(1);
  if (state[want]) current = want;
  // the worker boots (Pyodide, the GPU device) while the page opens its store and draws
  phases.begin("Starting: ", "downloading Pyodide");
  // the page's Python (harness.py) runs as the worker is ready, before start() resolves
  const harness = { source: fetchText("page/harness.py"), filename: "harness.py" };
  // the sample the page opens with: the site's shipped Programs of it readied as Python starts
  const starting = start({ prelude: harness, shipped: [current], on: {
    log: (l) => log(l.text, l.level === "error" || l.stream === "stderr" ? "err" : ""),
    startup: (p) => {
      app.startup.push(p.text);
      phases.next(p.text, pageClock(p.at));
    },
    // the worker's phases while a Start waits (compiling kernels)
    phase: (p) => { if (phases.active) phases.next(p.text, pageClock(p.at)); },
    snapshot: (p) => {
      app.snapshot = p;
      log(p.error ? `the Python snapshot for the next visit failed: ${p.error}` : p.from === "site"
        ? `kept the site's Python snapshot for the next visit (${(p.size / 1e6).toFixed(0)} MB, in ${(p.ms / 1000).toFixed(1)} s)`
        : `kept a Python snapshot for the next visit (${(p.size / 1e6).toFixed(0)} MB, made in ${(p.ms / 1000).toFixed(1)} s)`);
    },
  } });
  for (const p of [starting, harness.source]) p.catch(() => {}); // awaited below
  await openStorage();
  loadSource(state[current]).catch(() => {});
  renderAll();
  $("start").addEventListener("click", () => trainSample(current));
  $("stop").addEventListener("click", () => { if (running && running.name === current) tg.stop(); });
  $("reset").addEventListener("click", resetSample);
  $("download").addEventListener("click", downloadParams);
  $("load").addEventListener("click", () => $("load-file").click());
  $("load-file").addEventListener("change", (ev) => {
    const f = ev.target.files && ev.target.files[0];
    ev.target.value = "";
    if (f) loadParams(f);
  });
  $("steps").addEventListener("change", () => {
    state[current].stepsWanted = Math.max(1, parseInt($("steps").value, 10) || state[current].steps);
  });
  new ResizeObserver(() => { drawLossChart($("chart"), state[current].losses); renderView(); }).observe($("chart"));
  new ResizeObserver(renderGutter).observe($("source"));  // a new width wraps the lines anew
  try {
    tg = await starting;
    if (store) await tg.keepRuns({ store, details: saveDetails });
  } catch (e) {
    endWait("ready", { failed: true });
    setStatus(e.message, "error");
    app.startError = e.message;
    return;
  }
  tg.on("metric", onMetric);
  tg.on("view", onView);
  if (saved) {
    tg.on("autosaved", (p) => saved.saved(p));
    tg.on("autosave-error", (e) => saved.failed(e));
  }
  tg.on("error", (e) => {
    setStatus(e.message, "error");
    log(e.message, "err");
    renderControls();
  });
  const a = tg.info.adapter || {};
  const adapter = [a.description, a.vendor, a.architecture, a.device].filter(Boolean).join(" · ") || "WebGPU";
  $("fig-adapter").textContent = adapter;
  app.adapter = adapter;
  app.tg = tg;
  app.ready = true;
  if (!tg.info.crossOriginIsolated) {
    log("This page is not cross-origin isolated (opened from disk, the single file, or served without " +
      "COOP/COEP headers): Stop takes effect at the end of the current step, not inside it.");
  }
  const w = endWait("ready");
  setStatus(`Ready in ${(tg.info.timings.page_load_to_ready / 1000).toFixed(1)} s${w ? ` (${w.summary})` : ""} — ` +
    `Python ${tg.info.python}, tgweb ${tg.info.tgweb}. Pick a sample and press Start.`, "ok");
  renderAll();
  if (new URLSearchParams(location.search).has("autostart")) trainSample(current);
}

boot().catch((e) => {
  endWait("ready", { failed: true });
  setStatus(`The page failed to start: ${e.message}`, "error");
  app.startError = e.message;
  console.warn(e);
});
