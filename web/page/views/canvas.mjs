// The canvas sample's view: a drawing pad (mouse, pen or touch, through pointer
// events), the 8x8 image the model sees, and the model's probabilities for 0-9 as bars,
// updated while drawing. predict(strokes) in page/samples/canvas.py rasterizes the
// strokes as the data set's images were made and runs the attached inference graph.
// At most one call is in flight: strokes drawn meanwhile are sent when it returns.
// The strokes and the last answer live in module scope, so that a re-render (resize, a
// new "view" event while training) keeps them.
import { css, el, hidpi } from "../view.mjs";

const PAD = 240; // the drawing pad's CSS size (square)

let strokes = []; // [[[x, y] in 0..1 of the pad], ...]
let drawing = null; // the stroke under the pointer
let last = null; // predict()'s last answer: {pixels, probs, digit, step, blank}
let error = "";
let inflight = false, pending = false, sent = 0;
let els = null; // the current render's elements
let ctxRef = null;

/** Ask the page script for the drawing's probabilities; one call at a time. */
function request() {
  if (!ctxRef) return;
  if (inflight) { pending = true; return; }
  if (!strokes.length) { last = null; error = ""; update(); return; }
  inflight = true; pending = false;
  const id = ++sent;
  const scaled = strokes.map((s) => s.map(([x, y]) => [Math.round(x * 1000) / 10, Math.round(y * 1000) / 10]));
  setStatus(ctxRef.running ? "predicting when the running steps finish…" : "predicting…");
  ctxRef.call("predict", { strokes: scaled })
    .then((r) => { if (id === sent && strokes.length) { last = r; error = ""; } })
    .catch((e) => { error = String(e && e.message ? e.message : e); })
    .finally(() => {
      inflight = false;
      if (pending) request();
      else update();
    });
}

function setStatus(t) {
  if (els) els.status.textContent = t;
}

function drawPad() {
  if (!els) return;
  const g = hidpi(els.pad, PAD, PAD, "none");
  g.fillStyle = "#fff"; g.fillRect(0, 0, PAD, PAD);
  g.strokeStyle = css("--text"); g.lineWidth = 16; g.lineCap = "round"; g.lineJoin = "round";
  for (const s of strokes) {
    g.beginPath();
    s.forEach(([x, y], i) => (i ? g.lineTo(x * PAD, y * PAD) : g.moveTo(x * PAD, y * PAD)));
    if (s.length === 1) g.lineTo(s[0][0] * PAD + 0.01, s[0][1] * PAD);
    g.stroke();
  }
  if (!strokes.length) {
    g.fillStyle = css("--muted"); g.font = "14px system-ui, sans-serif"; g.textAlign = "center";
    g.fillText("draw a digit here", PAD / 2, PAD / 2);
  }
}

function drawSeen() {
  const c = els.seen, g = c.getContext("2d"), img = g.createImageData(8, 8);
  const px = last && !last.blank ? last.pixels : new Array(64).fill(0);
  px.forEach((p, i) => {
    const v = 255 - Math.round(255 * Math.max(0, Math.min(1, p)));
    img.data.set([v, v, v, 255], i * 4);
  });
  g.putImageData(img, 0, 0);
}

/** Bars, the 8x8 image and the status from `last`. */
function update() {
  if (!els) return;
  drawPad();
  drawSeen();
  const probs = last && !last.blank ? last.probs : null;
  const top = probs ? last.digit : -1;
  els.bars.querySelectorAll("li").forEach((li, d) => {
    const p = probs ? probs[d] : 0;
    li.dataset.prob = probs ? String(p) : "";
    li.setAttribute("aria-label", probs ? `${d}: ${(100 * p).toFixed(1)} %` : `${d}: no drawing`);
    li.querySelector(".cv-bar").style.width = `${(100 * p).toFixed(2)}%`;
    li.querySelector(".cv-bar").style.background = d === top ? css("--accent") : css("--accent-faint");
    li.querySelector(".cv-val").textContent = probs ? `${(100 * p).toFixed(1)} %` : "";
    li.style.fontWeight = d === top ? "700" : "400";
  });
  els.answer.textContent = probs ? `It reads ${top} (${(100 * probs[top]).toFixed(1)} %).` : "";
  if (error) setStatus(error);
  else if (inflight) setStatus("predicting…");
  else setStatus(strokes.length ? `predicted with the model of step ${last ? last.step : "?"}` :
    "Draw a digit with the mouse, a pen or a finger.");
}

function point(ev) {
  const r = els.pad.getBoundingClientRect();
  return [Math.max(0, Math.min(1, (ev.clientX - r.left) / r.width)),
    Math.max(0, Math.min(1, (ev.clientY - r.top) / r.height))];
}

function wire(pad) {
  pad.addEventListener("pointerdown", (ev) => {
    if (ev.button !== undefined && ev.button > 0) return;
    ev.preventDefault();
    pad.setPointerCapture(ev.pointerId);
    drawing = [point(ev)];
    strokes.push(drawing);
    drawPad();
    request();
  });
  pad.addEventListener("pointermove", (ev) => {
    if (!drawing) return;
    ev.preventDefault();
    const p = point(ev), q = drawing[drawing.length - 1];
    if (Math.hypot(p[0] - q[0], p[1] - q[1]) < 0.008) return;
    drawing.push(p);
    drawPad();
    request();
  });
  const end = () => {
    if (!drawing) return;
    drawing = null;
    request();
  };
  pad.addEventListener("pointerup", end);
  pad.addEventListener("pointercancel", end);
  pad.addEventListener("keydown", (ev) => {
    if (ev.key === "Delete" || ev.key === "Backspace") { ev.preventDefault(); clear(); }
  });
}

function clear() {
  strokes = []; drawing = null; last = null; error = "";
  sent++; // an answer still in flight is for the old drawing
  update();
}

export function render(body, view, ctx) {
  ctxRef = ctx;
  ctx.parts(body, view);
  const pad = el("canvas", {
    id: "canvas-pad", role: "img", tabIndex: 0,
    "aria-label": "drawing pad: draw a digit with the mouse, a pen or a finger (Delete clears it)",
    style: `width:${PAD}px;height:${PAD}px;touch-action:none;cursor:crosshair;border:1px solid var(--line);` +
      "border-radius:6px;background:#fff",
  });
  const clearBtn = el("button", { type: "button", id: "canvas-clear", textContent: "Clear" });
  clearBtn.addEventListener("click", clear);
  const seen = el("canvas", {
    id: "canvas-seen", width: 8, height: 8, role: "img",
    "aria-label": "the 8×8 image the model sees",
    style: "width:96px;height:96px;image-rendering:pixelated;border:1px solid var(--line);border-radius:4px",
  });
  const bars = el("ol", {
    id: "canvas-probs", "aria-label": "predicted probability of each digit",
    style: "list-style:none;margin:0;padding:0;display:grid;gap:3px;min-width:220px;flex:1",
  });
  for (let d = 0; d < 10; d++) {
    bars.append(el("li", { "data-digit": String(d), style: "display:flex;align-items:center;gap:.5rem" },
      el("span", { textContent: String(d), style: "font:600 .9rem var(--mono);width:1ch" }),
      el("span", { style: "flex:1;height:14px;background:var(--grid);border-radius:3px;overflow:hidden" },
        el("span", { className: "cv-bar", style: "display:block;height:100%;width:0" })),
      el("span", { className: "cv-val", style: "font:.8rem var(--mono);width:6ch;text-align:right" })));
  }
  const status = el("p", { className: "muted", role: "status", style: "margin:.3rem 0 0" });
  const answer = el("p", { id: "canvas-answer", style: "margin:.2rem 0;font-weight:600" });
  body.append(el("div", { style: "display:flex;flex-wrap:wrap;gap:1rem;align-items:flex-start;margin-top:.5rem" },
    el("div", { style: "display:grid;gap:.4rem;justify-items:start" }, pad, clearBtn),
    el("figure", { style: "margin:0;text-align:center" }, seen,
      el("figcaption", { className: "muted", textContent: "what the model sees", style: "font-size:.8rem" })),
    el("div", { style: "flex:1;min-width:220px" }, bars, answer, status)));
  els = { pad, seen, bars, status, answer };
  wire(pad);
  update();
  // a new model (training moved on): ask again for the drawing on the pad
  const step = view.figures && view.figures.step;
  if (strokes.length && !drawing && (!last || last.step !== step)) request();
}
