// The vae sample's view: ten test digits (one of each class) above their
// reconstructions; an 8x8 grid of digits decoded from a sweep of the 2-D latent plane
// (the prior's central 95 % on each axis); and the plane itself with the test digits'
// posterior means, coloured by class. Pointing at the plane (mouse, pen, touch or the
// arrow keys) decodes that point through decode_at(z1, z2) in page/samples/vae.py, one
// call in flight at a time. show() sends view.vae: {side, originals, reconstructions,
// grid: {n, z, images}, latent: {means, labels}}.
import { css, el, hidpi } from "../view.mjs";

const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
const PLANE = 260; // the latent plane's CSS size
const GRIDPX = 260; // the decoded grid's CSS size

let probe = null; // {z: [z1, z2], pixels, step}: the last decoded point
let want = null; // the point asked for last
let inflight = false, pending = false;
let range = 3; // the plane shows [-range, range] on both axes
let els = null, ctxRef = null, error = "";

/** An 8x8 image (values in [0, 1], ink dark) on a canvas of its own size. */
function digitCanvas(px, side, label, cssSize) {
  const c = el("canvas", { width: side, height: side, role: "img", "aria-label": label,
    style: `width:${cssSize}px;height:${cssSize}px;image-rendering:pixelated;border-radius:3px;` +
      "border:1px solid var(--line);display:block" });
  paint(c, px, side);
  return c;
}

function paint(c, px, side) {
  const g = c.getContext("2d"), img = g.createImageData(side, side);
  px.forEach((p, i) => {
    const v = 255 - Math.round(255 * Math.max(0, Math.min(1, p)));
    img.data.set([v, v, v, 255], i * 4);
  });
  g.putImageData(img, 0, 0);
}

function gridCanvas(grid, side) {
  const n = grid.n, s = n * side;
  const c = el("canvas", { id: "vae-grid", width: s, height: s, role: "img",
    "aria-label": `${n * n} digits decoded from a ${n}×${n} sweep of the latent plane: ` +
      "z₁ rising to the right, z₂ rising upwards",
    style: `width:${GRIDPX}px;height:${GRIDPX}px;image-rendering:pixelated;border:1px solid var(--line);` +
      "border-radius:4px;display:block" });
  const g = c.getContext("2d"), img = g.createImageData(s, s);
  grid.images.forEach((px, k) => {
    const r0 = Math.floor(k / n) * side, c0 = (k % n) * side;
    px.forEach((p, i) => {
      const v = 255 - Math.round(255 * Math.max(0, Math.min(1, p)));
      img.data.set([v, v, v, 255], ((r0 + Math.floor(i / side)) * s + c0 + (i % side)) * 4);
    });
  });
  g.putImageData(img, 0, 0);
  return c;
}

const X = (z) => PLANE * (z + range) / (2 * range);
const Y = (z) => PLANE * (range - z) / (2 * range);

function drawPlane(view) {
  const c = els.plane, g = hidpi(c, PLANE, PLANE, "none");
  g.fillStyle = "#fff"; g.fillRect(0, 0, PLANE, PLANE);
  g.strokeStyle = css("--grid"); g.lineWidth = 1;
  for (let t = -Math.floor(range); t <= range; t++) {
    g.beginPath(); g.moveTo(X(t), 0); g.lineTo(X(t), PLANE); g.stroke();
    g.beginPath(); g.moveTo(0, Y(t)); g.lineTo(PLANE, Y(t)); g.stroke();
  }
  g.strokeStyle = css("--muted");
  g.beginPath(); g.moveTo(X(0), 0); g.lineTo(X(0), PLANE); g.moveTo(0, Y(0)); g.lineTo(PLANE, Y(0)); g.stroke();
  // the decoded grid's extent
  const zs = view.vae.grid.z, lo = Math.min(...zs.map((z) => z[0])), hi = Math.max(...zs.map((z) => z[0]));
  g.setLineDash([4, 3]); g.strokeStyle = css("--accent");
  g.strokeRect(X(lo), Y(hi), X(hi) - X(lo), Y(lo) - Y(hi));
  g.setLineDash([]);
  g.font = "bold 9px system-ui, sans-serif"; g.textAlign = "center"; g.textBaseline = "middle";
  const { means, labels } = view.vae.latent;
  means.forEach(([a, b], i) => {
    g.fillStyle = COLORS[labels[i]];
    g.fillText(String(labels[i]), X(a), Y(b));
  });
  if (probe || want) {
    const [a, b] = (want || probe.z);
    g.strokeStyle = css("--text"); g.lineWidth = 2;
    g.beginPath(); g.arc(X(a), Y(b), 6, 0, 2 * Math.PI); g.stroke();
  }
  g.fillStyle = css("--muted"); g.font = "11px system-ui, sans-serif"; g.textAlign = "left";
  g.fillText("z₁ →", PLANE - 34, Y(0) - 8);
  g.fillText("↑ z₂", X(0) + 4, 10);
}

function updateProbe() {
  if (!els) return;
  if (probe) paint(els.probe, probe.pixels, 8);
  els.probeCap.textContent = probe
    ? `z = (${probe.z[0].toFixed(2)}, ${probe.z[1].toFixed(2)})` : "point at the plane";
  els.probe.setAttribute("aria-label", probe
    ? `the digit decoded at z = (${probe.z[0].toFixed(2)}, ${probe.z[1].toFixed(2)})` : "no point decoded yet");
  els.probe.dataset.z = probe ? JSON.stringify(probe.z) : "";
  els.status.textContent = error || (inflight ? "decoding…" : "");
}

function ask(z) {
  want = z;
  if (!ctxRef) return;
  if (inflight) { pending = true; return; }
  inflight = true; pending = false;
  updateProbe();
  ctxRef.call("decode_at", { z1: z[0], z2: z[1] })
    .then((r) => { probe = r; error = ""; })
    .catch((e) => { error = String(e && e.message ? e.message : e); })
    .finally(() => {
      inflight = false;
      if (pending) ask(want);
      else { want = null; if (els) { drawPlane(els.view); updateProbe(); } }
    });
}

function zAt(ev) {
  const r = els.plane.getBoundingClientRect();
  const fx = (ev.clientX - r.left) / r.width, fy = (ev.clientY - r.top) / r.height;
  const c = (v) => Math.max(-range, Math.min(range, v));
  return [c((2 * fx - 1) * range), c((1 - 2 * fy) * range)];
}

function wire(plane) {
  let down = false;
  const go = (ev) => { ev.preventDefault(); const z = zAt(ev); want = z; drawPlane(els.view); ask(z); };
  plane.addEventListener("pointerdown", (ev) => { down = true; plane.setPointerCapture(ev.pointerId); go(ev); });
  plane.addEventListener("pointermove", (ev) => { if (down || ev.pointerType === "mouse") go(ev); });
  plane.addEventListener("pointerup", () => { down = false; });
  plane.addEventListener("pointercancel", () => { down = false; });
  plane.addEventListener("keydown", (ev) => {
    const d = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, 1], ArrowDown: [0, -1] }[ev.key];
    if (!d) return;
    ev.preventDefault();
    const [a, b] = want || (probe ? probe.z : [0, 0]);
    const c = (v) => Math.max(-range, Math.min(range, v));
    const z = [c(a + 0.1 * d[0]), c(b + 0.1 * d[1])];
    want = z; drawPlane(els.view); ask(z);
  });
}

export function render(body, view, ctx) {
  ctxRef = ctx;
  ctx.parts(body, view);
  const v = view.vae;
  if (!v) return;
  const side = v.side;
  const extent = Math.max(2.5, ...v.latent.means.flat().map(Math.abs), ...v.grid.z.flat().map(Math.abs));
  range = Math.ceil(extent * 1.08 * 2) / 2;

  const pairs = el("div", { id: "vae-recon", style: "display:flex;flex-wrap:wrap;gap:.4rem" });
  v.originals.forEach((px, k) => {
    pairs.append(el("figure", { style: "margin:0;display:grid;gap:2px;justify-items:center" },
      digitCanvas(px, side, `test digit ${k}`, 44),
      digitCanvas(v.reconstructions[k], side, `its reconstruction`, 44),
      el("figcaption", { textContent: String(k), style: "font:600 .8rem var(--mono)" })));
  });
  const plane = el("canvas", { id: "vae-plane", tabIndex: 0, role: "img",
    "aria-label": "the latent plane with the test digits' posterior means; point at it (or use the arrow keys) " +
      "to decode a point",
    style: `width:${PLANE}px;height:${PLANE}px;touch-action:none;cursor:crosshair;border:1px solid var(--line);` +
      "border-radius:4px;display:block" });
  const probeC = el("canvas", { id: "vae-probe", width: side, height: side, role: "img",
    style: "width:96px;height:96px;image-rendering:pixelated;border:1px solid var(--line);border-radius:4px" });
  const probeCap = el("figcaption", { className: "muted", style: "font:.8rem var(--mono)" });
  const status = el("p", { className: "muted", role: "status", style: "margin:.2rem 0;min-height:1.2em" });
  const head = (t) => el("h3", { textContent: t, style: "font-size:.9rem;margin:.6rem 0 .3rem" });

  body.append(
    head("Test digits (top) and their reconstructions (bottom)"), pairs,
    el("div", { style: "display:flex;flex-wrap:wrap;gap:1.2rem;align-items:flex-start" },
      el("figure", { style: "margin:0" }, head("Decoded across the latent plane"), gridCanvas(v.grid, side),
        el("figcaption", { className: "muted", textContent: "z₁ → right, z₂ → up (dashed square on the plane)",
          style: "font-size:.8rem" })),
      el("figure", { style: "margin:0" }, head("The plane: test digits' means"), plane,
        el("figcaption", { className: "muted", textContent: "point at it to decode a latent point",
          style: "font-size:.8rem" })),
      el("figure", { style: "margin:0;text-align:center" }, head("Decoded at the pointer"), probeC, probeCap, status)));
  els = { plane, probe: probeC, probeCap, status, view };
  wire(plane);
  drawPlane(view);
  updateProbe();
  // a new model: decode the same point again
  if (probe && !inflight && probe.step !== (view.figures || {}).step) ask(probe.z);
}
