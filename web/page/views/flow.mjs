// The flow sample's view: 64 samples integrated with Euler steps through the learned
// velocity field (each captioned with the digit of its nearest training image), and the
// paths of the first 8 from noise (t = 0) to digits (t = 1). Buttons: the number of
// Euler steps, new noise, back to the fixed noise. sample(steps, seed) in
// page/samples/flow.py answers {pixels, labels, ratio, steps, seed, fixed, step, frames,
// times}; show() sends the same as view.flow while training. The choices and the last
// answer live in module scope, so that a re-render (resize, a new view) keeps them.
import { css, el, hidpi } from "../view.mjs";

const STEP_CHOICES = [1, 2, 4, 8, 16, 32];
const TILE = 34; // CSS pixels per sample in the grid (8x8 pixels, scaled)
const GAP = 14; // room for a caption under each tile

let last = null; // the newest answer, from sample() or from show()
let lastView = null;
let inflight = false;
let error = "";
let els = null;
let ctxRef = null;

/** One 8x8 image (pixels in [0, 1], ink dark) drawn at (x, y), `size` CSS pixels wide. */
function tile(g, px, x, y, size) {
  const s = size / 8;
  px.forEach((p, i) => {
    const v = 255 - Math.round(255 * Math.max(0, Math.min(1, p)));
    g.fillStyle = `rgb(${v},${v},${v})`;
    // a hair wider than a pixel, so that no seams show between them
    g.fillRect(x + (i % 8) * s, y + Math.floor(i / 8) * s, s + 0.5, s + 0.5);
  });
}

function drawGrid() {
  const c = els.grid, cols = 8, rows = last ? Math.ceil(last.pixels.length / cols) : 8;
  const w = cols * (TILE + 6), h = rows * (TILE + GAP);
  const g = hidpi(c, w, h, "both");
  g.fillStyle = "#fff"; g.fillRect(0, 0, w, h);
  if (!last) return;
  g.font = "11px system-ui, sans-serif"; g.textAlign = "center"; g.textBaseline = "top";
  last.pixels.forEach((px, k) => {
    const x = (k % cols) * (TILE + 6) + 3, y = Math.floor(k / cols) * (TILE + GAP);
    tile(g, px, x, y, TILE);
    g.fillStyle = css("--muted");
    g.fillText(String(last.labels[k]), x + TILE / 2, y + TILE + 1);
  });
  const counts = Array(10).fill(0);
  last.labels.forEach((d) => counts[d]++);
  c.setAttribute("aria-label", `${last.pixels.length} samples after ${last.steps} Euler steps; ` +
    "nearest training digits: " + counts.map((n, d) => `${d}: ${n}`).join(", "));
  Object.assign(c.dataset, { seed: String(last.seed), steps: String(last.steps), step: String(last.step),
    labels: last.labels.join("") });
}

function drawPaths() {
  const c = els.paths;
  if (!last || !last.frames) { hidpi(c, 10, 10, "both"); return; }
  const cols = last.frames.length, rows = last.frames[0].length, size = 30, pad = 12, head = 16;
  const w = cols * (size + pad), h = head + rows * (size + 4);
  const g = hidpi(c, w, h, "both");
  g.fillStyle = "#fff"; g.fillRect(0, 0, w, h);
  g.font = "11px system-ui, sans-serif"; g.textAlign = "center"; g.textBaseline = "top";
  last.frames.forEach((frame, f) => {
    const x = f * (size + pad) + pad / 2;
    g.fillStyle = css("--muted");
    g.fillText(String(+last.times[f].toFixed(2)), x + size / 2, 2); // t
    frame.forEach((px, r) => tile(g, px, x, head + r * (size + 4), size));
  });
  c.setAttribute("aria-label", `the first ${rows} samples at t = ` +
    last.times.map((t) => +t.toFixed(2)).join(", ") + ": from noise to digits");
}

function update() {
  if (!els) return;
  els.steps.value = String(last ? last.steps : 16);
  els.newNoise.disabled = els.fixed.disabled = els.steps.disabled = inflight;
  drawGrid();
  drawPaths();
  let st;
  if (error) st = error;
  else if (inflight) st = ctxRef && ctxRef.running ? "sampling when the running steps finish…" : "sampling…";
  else if (last) {
    st = `${last.pixels.length} samples from ${last.fixed ? "the fixed" : "new"} noise (seed ${last.seed}), ` +
      `${last.steps} Euler step${last.steps === 1 ? "" : "s"}, model of step ${last.step}. ` +
      `Their mean distance to the nearest training image is ${last.ratio.toFixed(2)}× that of real test digits.`;
  } else st = "Press Start: samples appear as the model trains.";
  els.status.textContent = st;
}

/** Ask the page script for samples; one call at a time. */
function sample(kwargs) {
  if (!ctxRef || inflight) return;
  inflight = true; error = "";
  update();
  ctxRef.call("sample", kwargs)
    .then((r) => {
      last = r;
      if (lastView) ctxRef.setView({ ...lastView, flow: r }); // re-renders from `last`
    })
    .catch((e) => { error = String(e && e.message ? e.message : e); })
    .finally(() => { inflight = false; update(); });
}

export function render(body, view, ctx) {
  ctxRef = ctx;
  lastView = view;
  if (view.flow && view.flow !== last) last = view.flow;
  ctx.parts(body, view);
  const steps = el("select", { id: "flow-steps", "aria-label": "Euler steps from noise to a digit" },
    ...STEP_CHOICES.map((n) => el("option", { value: String(n), textContent: String(n) })));
  const newNoise = el("button", { type: "button", id: "flow-new", textContent: "New noise" });
  const fixed = el("button", { type: "button", id: "flow-fixed", textContent: "Fixed noise" });
  steps.addEventListener("change", () => sample({ steps: Number(steps.value) }));
  newNoise.addEventListener("click", () => sample({ seed: 1 + Math.floor(Math.random() * 2147483646) }));
  fixed.addEventListener("click", () => sample({ seed: 1234 }));
  const grid = el("canvas", { id: "flow-grid", role: "img", "aria-label": "samples (none yet)",
    style: "display:block;border:1px solid var(--line);border-radius:6px" });
  const paths = el("canvas", { id: "flow-paths", role: "img",
    style: "display:block;border:1px solid var(--line);border-radius:6px" });
  const status = el("p", { className: "muted", role: "status", id: "flow-status", style: "margin:.4rem 0 0" });
  body.append(
    el("div", { style: "display:flex;flex-wrap:wrap;gap:.6rem;align-items:center;margin:.3rem 0 .6rem" },
      el("label", { htmlFor: "flow-steps", textContent: "Euler steps", style: "font-weight:600" }),
      steps, newNoise, fixed),
    el("div", { style: "display:flex;flex-wrap:wrap;gap:1rem;align-items:flex-start" },
      el("figure", { style: "margin:0" }, grid,
        el("figcaption", { className: "muted", style: "font-size:.85rem;max-width:330px",
          textContent: "samples; under each, the digit of its nearest training image" })),
      el("figure", { style: "margin:0" }, paths,
        el("figcaption", { className: "muted", style: "font-size:.85rem;max-width:220px",
          textContent: "the first eight on their way from noise (t = 0) to digits (t = 1)" }))),
    status);
  els = { steps, newNoise, fixed, grid, paths, status };
  update();
}
