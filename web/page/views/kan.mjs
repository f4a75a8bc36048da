// The kan sample's view: the network's fit against sin(πx), then its 8 learned edge
// functions as small plots: the 4 edges x → h_j of the first layer and the 4 edges
// h_i → y of the second (each over the range its input covers). show() in
// page/samples/kan.py sends view.kan: {x, target, model, ranges, edges: [{layer, i, j, x, y}]}.
import { css, hidpi } from "../view.mjs";

const SUB = "₀₁₂₃₄₅₆₇₈₉";
const sub = (n) => String(n).split("").map((d) => SUB[+d]).join("");

function sized(c, h) {
  const w = Math.max(60, c.clientWidth);
  return [hidpi(c, w, h), w, h];
}

/** Round values between lo and hi, at most about `most` of them. */
const niceTicks = (lo, hi, most = 8) => {
  const raw = (hi - lo) / most || 1;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const s = [1, 2, 5, 10].map((m) => m * p).find((v) => v >= raw);
  const out = [];
  for (let v = Math.ceil(lo / s) * s; v <= hi + 1e-9; v += s) out.push(Math.abs(v) < 1e-12 ? 0 : v);
  return out;
};
const label = (v) => String(+v.toPrecision(3));

/** Lines of series [{ys, color, width, dash, name}] over xs on canvas c (CSS height h). */
function plot(c, h, xs, series, { small = false, marks = [] } = {}) {
  const [g, w] = sized(c, h);
  const pad = small ? { l: 30, r: 6, t: 6, b: 16 } : { l: 38, r: 10, t: 12, b: 22 };
  const ys = series.flatMap((s) => s.ys).filter(Number.isFinite);
  let lo = Math.min(...ys), hi = Math.max(...ys);
  if (!(hi - lo > 1e-6)) { lo -= 0.5; hi += 0.5; }
  const m = (hi - lo) * 0.08; lo -= m; hi += m;
  const x0 = xs[0], x1 = xs[xs.length - 1];
  const X = (x) => pad.l + (w - pad.l - pad.r) * (x - x0) / (x1 - x0 || 1);
  const Y = (y) => pad.t + (h - pad.t - pad.b) * (hi - y) / (hi - lo);
  g.font = `${small ? 10 : 11}px system-ui, sans-serif`;
  g.lineWidth = 1; g.strokeStyle = css("--grid"); g.fillStyle = css("--muted");
  g.textAlign = "right"; g.textBaseline = "middle";
  for (const y of niceTicks(lo, hi, small ? 4 : 8)) {
    const yy = Math.round(Y(y)) + 0.5;
    g.beginPath(); g.moveTo(pad.l, yy); g.lineTo(w - pad.r, yy); g.stroke();
    g.fillText(label(y), pad.l - 4, yy);
  }
  g.textAlign = "center"; g.textBaseline = "top";
  for (const x of niceTicks(x0, x1, small ? 3 : 8)) g.fillText(label(x), X(x), h - pad.b + 4);
  // grid ends (where the spline stops bending and is held constant)
  g.strokeStyle = css("--accent-faint"); g.setLineDash([3, 3]);
  for (const x of marks.filter((v) => v > x0 && v < x1)) {
    g.beginPath(); g.moveTo(X(x), pad.t); g.lineTo(X(x), h - pad.b); g.stroke();
  }
  g.setLineDash([]);
  series.forEach((s, k) => {
    g.strokeStyle = s.color; g.lineWidth = s.width || 2; g.setLineDash(s.dash || []);
    g.beginPath();
    s.ys.forEach((y, i) => (i ? g.lineTo(X(xs[i]), Y(y)) : g.moveTo(X(xs[i]), Y(y))));
    g.stroke();
    g.setLineDash([]);
    if (s.name) {
      g.fillStyle = s.color; g.textAlign = "left"; g.textBaseline = "top";
      g.fillText(s.name, pad.l + 8 + k * 90, pad.t + 2);
    }
  });
}

function canvas(aria) {
  const c = document.createElement("canvas");
  c.setAttribute("role", "img");
  c.setAttribute("aria-label", aria);
  c.style.width = "100%";
  c.style.display = "block";
  c.style.border = "1px solid var(--line)";
  c.style.borderRadius = "6px";
  c.style.background = "#fff";
  return c;
}

function edgeRow(body, title, edges, marks) {
  const p = document.createElement("p");
  p.className = "muted";
  p.style.margin = ".8rem 0 .35rem";
  p.style.fontSize = ".85rem";
  p.textContent = title;
  const row = document.createElement("div");
  row.className = "kan-edges";
  row.style.display = "grid";
  row.style.gridTemplateColumns = "repeat(4, minmax(0, 1fr))";
  row.style.gap = ".5rem";
  body.append(p, row);
  for (const e of edges) {
    const name = e.layer === 0 ? `x → h${sub(e.j + 1)}` : `h${sub(e.i + 1)} → y`;
    const f = document.createElement("figure");
    f.style.margin = "0";
    f.dataset.edge = `${e.layer}-${e.i}-${e.j}`;
    const c = canvas(`learned edge function ${name.replace("→", "to")}`);
    const cap = document.createElement("figcaption");
    cap.textContent = `φ ${name}`;
    cap.style.font = "600 .8rem var(--mono)";
    cap.style.textAlign = "center";
    cap.style.color = "var(--muted-strong)";
    f.append(c, cap);
    row.append(f);
    plot(c, 110, e.x, [{ ys: e.y, color: css("--accent"), width: 2 }], { small: true, marks });
  }
}

export function render(body, view, ctx) {
  const k = view.kan;
  if (!k) { ctx.parts(body, view); return; }
  const fit = canvas("the network's fit against sin(πx) on [-1, 1]");
  fit.className = "kan-fit";
  body.append(fit);
  plot(fit, 210, k.x, [
    { ys: k.target, color: css("--muted-strong"), width: 1.5, dash: [5, 4], name: "sin(πx)" },
    { ys: k.model, color: css("--accent"), width: 2.5, name: "KAN" },
  ]);
  const [r0, r1] = k.ranges || [[-1, 1], [-2, 2]];
  edgeRow(body, `Layer 1: the edge functions x → h (x in [${r0}], the spline grid)`,
    k.edges.filter((e) => e.layer === 0), r0);
  edgeRow(body, `Layer 2: the edge functions h → y, over the range each h covers ` +
    `(dashed: the grid's ends at ${r1[0]} and ${r1[1]}; y is their sum)`,
    k.edges.filter((e) => e.layer === 1), r1);
  ctx.parts(body, { ...view, kan: undefined, figures: undefined });
}
