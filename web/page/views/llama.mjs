// The llama sample's view: a temperature slider and a Sample button, the names sampled,
// and the model's distribution of a name's first letter at that temperature as bars.
// sample(temperature) in page/samples/llama.py runs the sampler graph attached once
// (temperature is one of its inputs: moving the slider compiles nothing) and answers
// {names, temperature, entropy, first, traces, step}. show() sends the same as view.llama.
// The slider's value and the last answer live in module scope, so that a re-render
// (resize, a new "view" event while training) keeps them.
import { css, el, hidpi } from "../view.mjs";

const LETTERS = ["end", ..."abcdefghijklmnopqrstuvwxyz"];

let temperature = null; // the slider's value; null until the first view sets it
let last = null; // the newest answer: from sample() or from show()
let lastView = null;
let inflight = false;
let error = "";
let els = null;
let ctxRef = null;

const cap = (s) => (s ? s[0].toUpperCase() + s.slice(1) : "(empty)");

/** Ask the page script for names at the slider's temperature; one call at a time. */
function sample() {
  if (!ctxRef || inflight) return;
  inflight = true; error = "";
  update();
  ctxRef.call("sample", { temperature: temperature })
    .then((r) => {
      last = r;
      if (lastView) ctxRef.setView({ ...lastView, llama: r }); // re-renders from `last`
    })
    .catch((e) => { error = String(e && e.message ? e.message : e); })
    .finally(() => { inflight = false; update(); });
}

/** softmax(z / t) from p = softmax(z / t0): exactly p^(t0 / t), normalised. */
function atTemperature(p, t0, t) {
  const q = p.map((v) => (v > 0 ? Math.pow(v, t0 / t) : 0));
  const s = q.reduce((a, b) => a + b, 0);
  return s > 0 ? q.map((v) => v / s) : p;
}

function drawBars() {
  const c = els.bars, w = Math.max(280, c.clientWidth || 560), h = 150;
  const g = hidpi(c, w, h);
  g.clearRect(0, 0, w, h);
  const p = last ? atTemperature(last.first, last.temperature, temperature) : null;
  const pad = { l: 6, r: 6, t: 8, b: 20 };
  const slot = (w - pad.l - pad.r) / LETTERS.length;
  const top = p ? Math.max(...p, 1e-9) : 1;
  g.font = "11px system-ui, sans-serif"; g.textAlign = "center"; g.textBaseline = "top";
  LETTERS.forEach((name, i) => {
    const x = pad.l + i * slot;
    const v = p ? p[i] : 0;
    const bh = (h - pad.t - pad.b) * v / top;
    g.fillStyle = v === top ? css("--accent") : css("--accent-faint");
    g.fillRect(x + 1, h - pad.b - bh, Math.max(1, slot - 2), bh);
    g.fillStyle = css("--muted");
    g.fillText(i === 0 ? "·" : name, x + slot / 2, h - pad.b + 4);
  });
  const best = p ? p.indexOf(top) : -1;
  c.setAttribute("aria-label", p
    ? `the first letter's probabilities at temperature ${temperature.toFixed(2)}: most likely ` +
      `${LETTERS[best]} (${(100 * top).toFixed(1)} %)`
    : "the first letter's probabilities (none yet)");
}

function update() {
  if (!els) return;
  els.value.textContent = temperature.toFixed(2);
  els.button.disabled = inflight;
  els.list.replaceChildren(...(last ? last.names : []).map((n) => el("li", { textContent: cap(n) })));
  els.list.setAttribute("aria-label", last ? `names sampled at temperature ${last.temperature}` : "names");
  if (last) {  // what Python answered, for people who inspect the page and for the tests
    Object.assign(els.list.dataset, { temperature: String(last.temperature), traces: String(last.traces),
      entropy: String(last.entropy), step: String(last.step) });
  }
  drawBars();
  let st;
  if (error) st = error;
  else if (inflight) st = ctxRef && ctxRef.running ? "sampling when the running steps finish…" : "sampling…";
  else if (last) {
    st = `${last.names.length} names at temperature ${last.temperature.toFixed(2)} from the model of step ` +
      `${last.step}; mean entropy ${last.entropy.toFixed(2)} nats per letter; the sampler was compiled ` +
      `${last.traces === 1 ? "once" : `${last.traces} times`}.`;
  } else st = "Set a temperature and press Sample.";
  els.status.textContent = st;
  els.status.classList.toggle("error", !!error);
}

export function render(body, view, ctx) {
  ctxRef = ctx;
  lastView = view;
  // a newer answer from show() (training moved on) replaces ours; ours stays otherwise
  if (view.llama && (!last || view.llama !== last)) last = view.llama;
  if (temperature === null) temperature = last ? last.temperature : 1.0;
  ctx.parts(body, view);
  const slider = el("input", {
    type: "range", id: "llama-temperature", min: "0.1", max: "2", step: "0.05", value: String(temperature),
    "aria-label": "sampling temperature", style: "flex:1;min-width:160px;max-width:320px",
  });
  const value = el("output", { id: "llama-temperature-value", for: "llama-temperature",
    style: "font:600 .95rem var(--mono);width:4ch" });
  const button = el("button", { type: "button", id: "llama-sample", textContent: "Sample" });
  slider.addEventListener("input", () => { temperature = Number(slider.value); update(); });
  slider.addEventListener("keydown", (ev) => { if (ev.key === "Enter") sample(); });
  button.addEventListener("click", sample);
  const list = el("ul", { id: "llama-names", className: "text-list" });
  const bars = el("canvas", { id: "llama-first", role: "img", style: "width:100%;display:block" });
  const status = el("p", { className: "muted", role: "status", id: "llama-status", style: "margin:.4rem 0 0" });
  body.append(
    el("div", { style: "display:flex;flex-wrap:wrap;gap:.6rem;align-items:center;margin-top:.3rem" },
      el("label", { htmlFor: "llama-temperature", textContent: "temperature", style: "font-weight:600" }),
      slider, value, button,
      el("span", { className: "muted", style: "font-size:.85rem",
        textContent: "low: safe, common names; high: adventurous ones" })),
    list,
    el("figure", { style: "margin:.8rem 0 0" }, bars,
      el("figcaption", { className: "muted", style: "font-size:.85rem",
        textContent: "how a name starts: the model's first-letter probabilities at the slider's temperature " +
          "(· = an empty name)" })),
    status);
  els = { slider, value, button, list, bars, status };
  update();
}
