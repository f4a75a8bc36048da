// The trainer page's charts, drawn on canvases sized to their CSS box: the loss
// curve, a sample's curves (x against named series) and heat maps. No state of the
// page's own: app.mjs passes what to draw.

/**
 * Canvas c made w x h CSS pixels at the device's pixel ratio (its backing store
 * reallocated, so cleared); `style` says which of its CSS sizes to set as well:
 * "height", "both" or "none". Returns its 2D context, scaled to draw in CSS pixels.
 */
export function hidpi(c, w, h, style = "height") {
  const dpr = window.devicePixelRatio || 1;
  c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
  if (style === "both") c.style.width = w + "px";
  if (style !== "none") c.style.height = h + "px";
  const g = c.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  return g;
}

function fitCanvas(c, cssHeight) {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(50, c.clientWidth), h = cssHeight;
  if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) {
    c.width = Math.round(w * dpr);
    c.height = Math.round(h * dpr);
  }
  c.style.height = h + "px";
  const g = c.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  return [g, w, h];
}

/** A CSS custom property of the page (app.css), e.g. css("--accent"); "#555" if unset. */
export const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#555";

export function fmt(v) {
  if (v == null || !Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(2);
  return v.toPrecision(4).replace(/\.?0+$/, "") || "0";
}

// a log10 tick: 0.01, 1, 100 or 1e-5; halves as 0.03, 3e-5
function tick(lv) {
  const v = 10 ** lv;
  if (lv >= -3 && lv <= 4) return String(Number(v.toPrecision(1)));
  const [m, e] = v.toExponential(0).split("e");
  return `${m}e${Number(e)}`;
}

function smooth(losses, logScale = true) {
  // an exponential moving average, of log(loss) on a log scale
  const out = [];
  let m = null;
  const alpha = Math.max(0.02, Math.min(0.3, 20 / Math.max(1, losses.length)));
  for (const [, v] of losses) {
    const lv = logScale ? Math.log(Math.max(v, 1e-12)) : v;
    m = m == null ? lv : m + alpha * (lv - m);
    out.push(logScale ? Math.exp(m) : m);
  }
  return out;
}

/** The training loss (raw and smoothed) on canvas c; losses: [[step, loss]]. On a log scale
 * when every loss is positive, else (a policy-gradient surrogate, say) on a linear one. */
export function drawLossChart(c, losses) {
  const [g, w, h] = fitCanvas(c, 220);
  const pts = losses.filter(([, v]) => Number.isFinite(v));
  const logScale = pts.every(([, v]) => v > 0);
  const T = logScale ? Math.log10 : (v) => v;
  const pad = { l: 52, r: 12, t: 10, b: 26 };
  g.font = "11px system-ui, sans-serif";
  g.fillStyle = css("--muted");
  c.dataset.scale = logScale ? "log" : "linear";
  if (pts.length < 2) {
    g.fillText(pts.length ? "…" : "no steps yet", pad.l, h / 2);
    c.dataset.points = String(pts.length);
    return;
  }
  const sm = smooth(pts, logScale);
  const ys = pts.map(([, v]) => T(v));
  let lo, hi;
  if (logScale) {
    const span10 = Math.max(...ys) - Math.min(...ys);
    const q = span10 > 1.5 ? 2 : 10;   // round the range to half decades, or tenths when narrow
    lo = Math.floor(Math.min(...ys) * q) / q; hi = Math.ceil(Math.max(...ys) * q) / q;
    if (hi - lo < 0.2) hi = lo + 0.2;
  } else {
    lo = Math.min(...ys); hi = Math.max(...ys);
    const margin = Math.max((hi - lo) * 0.05, 1e-6);
    lo -= margin; hi += margin;
  }
  const x0 = pts[0][0], x1 = Math.max(pts[pts.length - 1][0], x0 + 1);
  const X = (st) => pad.l + (w - pad.l - pad.r) * (st - x0) / (x1 - x0);
  const Y = (lv) => pad.t + (h - pad.t - pad.b) * (hi - lv) / (hi - lo);
  // grid: decades (or halves) on y when a log range is wide, round values otherwise
  g.strokeStyle = css("--grid");
  g.lineWidth = 1;
  g.textAlign = "right";
  g.textBaseline = "middle";
  const yTicks = [];
  if (logScale && hi - lo > 1) {
    const yStep = hi - lo > 3 ? 1 : 0.5;
    for (let lv = Math.ceil(lo / yStep) * yStep; lv <= hi + 1e-9; lv += yStep) yTicks.push([lv, tick(lv)]);
  } else {
    const vlo = logScale ? 10 ** lo : lo, vhi = logScale ? 10 ** hi : hi, raw = (vhi - vlo) / 4;
    const p = 10 ** Math.floor(Math.log10(raw));
    const st = [1, 2, 5, 10].map((k) => k * p).find((v) => v >= raw);
    for (let v = Math.ceil(vlo / st) * st; v <= vhi + Math.abs(vhi) * 1e-9 + 1e-12; v += st) {
      const r = Number(v.toPrecision(3));
      yTicks.push([T(v), Math.abs(r) >= 1e-3 || r === 0 ? String(r) : v.toExponential(1)]);
    }
  }
  for (const [lv, label] of yTicks) {
    const y = Math.round(Y(lv)) + 0.5;
    g.beginPath(); g.moveTo(pad.l, y); g.lineTo(w - pad.r, y); g.stroke();
    g.fillText(label, pad.l - 6, y);
  }
  g.textAlign = "center";
  g.textBaseline = "top";
  const span = x1 - x0, raw = span / 6, p10 = 10 ** Math.floor(Math.log10(raw));
  const xStep = [1, 2, 5, 10].map((k) => k * p10).find((v) => v >= raw) || raw;
  for (let st = Math.ceil(x0 / xStep) * xStep; st <= x1; st += xStep) {
    const x = Math.round(X(st)) + 0.5;
    g.beginPath(); g.moveTo(x, pad.t); g.lineTo(x, h - pad.b); g.stroke();
    g.fillText(String(st), x, h - pad.b + 6);
  }
  const line = (vals, color, width) => {
    g.strokeStyle = color; g.lineWidth = width; g.lineJoin = "round"; g.beginPath();
    pts.forEach(([st], i) => {
      const x = X(st), y = Y(T(vals[i]));
      i ? g.lineTo(x, y) : g.moveTo(x, y);
    });
    g.stroke();
  };
  line(pts.map(([, v]) => v), css("--accent-faint"), 1);
  line(sm, css("--accent"), 2);
  c.dataset.points = String(pts.length);
  c.dataset.first = String(sm[0]);
  c.dataset.last = String(sm[sm.length - 1]);
  c.dataset.firstStep = String(pts[0][0]);
  c.dataset.lastStep = String(pts[pts.length - 1][0]);
  c.setAttribute("aria-label", `training loss from ${fmt(pts[0][1])} at step ${pts[0][0]} to ` +
    `${fmt(pts[pts.length - 1][1])} at step ${pts[pts.length - 1][0]}`);
}

export function drawCurve(c, curve) {
  const [g, w, h] = fitCanvas(c, 220);
  const pad = { l: 36, r: 10, t: 10, b: 22 };
  const xs = curve.x, series = Object.entries(curve.series);
  const all = series.flatMap(([, ys]) => ys).filter(Number.isFinite);
  let lo = Math.min(...all), hi = Math.max(...all);
  if (hi - lo < 1e-6) { lo -= 1; hi += 1; }
  const m = (hi - lo) * 0.08; lo -= m; hi += m;
  const X = (x) => pad.l + (w - pad.l - pad.r) * (x - xs[0]) / (xs[xs.length - 1] - xs[0]);
  const Y = (y) => pad.t + (h - pad.t - pad.b) * (hi - y) / (hi - lo);
  g.font = "11px system-ui, sans-serif";
  g.strokeStyle = css("--grid"); g.fillStyle = css("--muted");
  g.textAlign = "right"; g.textBaseline = "middle";
  for (const y of [-1, -0.5, 0, 0.5, 1].filter((v) => v > lo && v < hi)) {
    const yy = Math.round(Y(y)) + 0.5;
    g.beginPath(); g.moveTo(pad.l, yy); g.lineTo(w - pad.r, yy); g.stroke();
    g.fillText(String(y), pad.l - 5, yy);
  }
  g.textAlign = "center"; g.textBaseline = "top";
  for (const [x, label] of [[-Math.PI, "−π"], [-Math.PI / 2, "−π/2"], [0, "0"], [Math.PI / 2, "π/2"], [Math.PI, "π"]]) {
    if (x < xs[0] - 1e-9 || x > xs[xs.length - 1] + 1e-9) continue;
    g.fillText(label, X(x), h - pad.b + 5);
  }
  const colors = [css("--muted-strong"), css("--accent")];
  series.forEach(([name, ys], k) => {
    g.strokeStyle = colors[k % colors.length];
    g.lineWidth = k ? 2.5 : 1.5;
    g.setLineDash(k ? [] : [5, 4]);
    g.beginPath();
    ys.forEach((y, i) => (i ? g.lineTo(X(xs[i]), Y(y)) : g.moveTo(X(xs[i]), Y(y))));
    g.stroke();
    g.setLineDash([]);
    g.fillStyle = colors[k % colors.length];
    g.textAlign = "left";
    g.fillText(name, pad.l + 8 + k * 70, pad.t + 2);
  });
}

export function drawHeat(c, map, ticks, size) {
  const n = map.length, cell = Math.floor((size - 16) / n);
  const side = cell * n + 16;
  const g = hidpi(c, side, side, "both");
  g.font = "10px ui-monospace, monospace";
  g.fillStyle = css("--muted"); g.textAlign = "center"; g.textBaseline = "middle";
  for (let i = 0; i < n; i++) {
    g.fillText(ticks[i] ?? "", 16 + cell * i + cell / 2, 7);
    g.fillText(ticks[i] ?? "", 7, 16 + cell * i + cell / 2);
    for (let j = 0; j < n; j++) {
      const v = Math.max(0, Math.min(1, map[i][j]));
      g.fillStyle = `hsl(222 70% ${97 - 62 * Math.sqrt(v)}%)`;
      g.fillRect(16 + cell * j, 16 + cell * i, cell - 1, cell - 1);
    }
  }
}
