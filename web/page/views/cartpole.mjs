// The cartpole sample's view: an episode played by the current policy, animated in real
// time on a canvas (states from episode() in page/samples/cartpole.py, through ctx.call),
// and the mean return of the training episodes over the steps, with the goal (195).
// show() sends view.cartpole: {steps, returns, evaluated, at}.
import { css, hidpi } from "../view.mjs";

// module state: kept across re-renders (the view is redrawn on resize and every "view" event)
const anim = { ep: null, t0: 0, raf: 0, canvas: null, status: null, pending: false };
let greedy = false;
let autoFor = null;   // the training step whose policy was last played automatically
let autoTimer = 0;

function sized(c, h) {
  const w = Math.max(120, c.clientWidth);
  return [hidpi(c, w, h), w, h];
}

function makeCanvas(aria, cls) {
  const c = document.createElement("canvas");
  c.className = cls;
  c.setAttribute("role", "img");
  c.setAttribute("aria-label", aria);
  Object.assign(c.style, { width: "100%", display: "block", border: "1px solid var(--line)",
    borderRadius: "8px", background: "#fff" });
  return c;
}

/** The cart and pole at frame i of episode ep (or at rest when there is none). */
function drawScene(c, ep, i) {
  const [g, w, h] = sized(c, 220);
  const xLimit = ep ? ep.x_limit : 2.4;
  const x = ep ? ep.x[i] : 0, angle = ep ? ep.angle[i] : 0;
  const scale = (w - 40) / (2 * (xLimit + 0.6));   // pixels per metre
  const X = (m) => w / 2 + m * scale;
  const ground = h - 40;
  // the track and its ends
  g.strokeStyle = css("--muted"); g.lineWidth = 2;
  g.beginPath(); g.moveTo(X(-xLimit - 0.4), ground); g.lineTo(X(xLimit + 0.4), ground); g.stroke();
  g.strokeStyle = css("--err") || "#c62828"; g.lineWidth = 1.5; g.setLineDash([4, 3]);
  for (const e of [-xLimit, xLimit]) { g.beginPath(); g.moveTo(X(e), ground + 12); g.lineTo(X(e), 14); g.stroke(); }
  g.setLineDash([]);
  // the cart
  const cw = 0.5 * scale, ch = 0.28 * scale, cx = X(x), top = ground - ch - 6;
  g.fillStyle = css("--muted-strong");
  g.fillRect(cx - cw / 2, top, cw, ch);
  g.fillStyle = "#222";
  for (const dx of [-cw / 3, cw / 3]) { g.beginPath(); g.arc(cx + dx, ground - 4, 5, 0, 2 * Math.PI); g.fill(); }
  // the pole: 1 m long, angle from vertical, positive leaning right
  const len = Math.min(1.0 * scale, top - 10), px = cx + len * Math.sin(angle), py = top - len * Math.cos(angle);
  const failed = ep && ep.failed && i === ep.x.length - 1;
  g.strokeStyle = failed ? (css("--err") || "#c62828") : css("--accent"); g.lineWidth = 7; g.lineCap = "round";
  g.beginPath(); g.moveTo(cx, top); g.lineTo(px, py); g.stroke();
  g.fillStyle = "#222"; g.beginPath(); g.arc(cx, top, 4, 0, 2 * Math.PI); g.fill();
  // the push of this timestep
  if (ep && i < ep.actions.length) {
    const dir = ep.actions[i] ? 1 : -1;
    g.strokeStyle = css("--muted"); g.fillStyle = css("--muted"); g.lineWidth = 2;
    const ax = cx + dir * (cw / 2 + 6), bx = ax + dir * 26, ay = top + ch / 2;
    g.beginPath(); g.moveTo(ax, ay); g.lineTo(bx, ay); g.stroke();
    g.beginPath(); g.moveTo(bx + dir * 6, ay); g.lineTo(bx, ay - 5); g.lineTo(bx, ay + 5); g.fill();
  }
  g.font = "12px system-ui, sans-serif"; g.fillStyle = css("--muted"); g.textAlign = "left"; g.textBaseline = "top";
  g.fillText(ep ? `t = ${(i * ep.dt).toFixed(2)} s   step ${i} of ${ep.return}` : "no episode yet", 10, 8);
}

function frameAt(now) {
  const ep = anim.ep;
  return Math.min(ep.x.length - 1, Math.floor((now - anim.t0) / (ep.dt * 1000)));
}

function tick(now) {
  anim.raf = 0;
  const ep = anim.ep;
  if (!ep || !anim.canvas || !anim.canvas.isConnected) return;
  const i = frameAt(now);
  drawScene(anim.canvas, ep, i);
  if (i < ep.x.length - 1) anim.raf = requestAnimationFrame(tick);
  else setStatus(summary(ep));
}

function summary(ep) {
  const how = ep.greedy ? "greedy" : "sampled";
  return ep.failed
    ? `The pole fell after ${ep.return} steps (${how} actions, policy after training step ${ep.step}).`
    : `Balanced for all ${ep.return} steps (${how} actions, policy after training step ${ep.step}).`;
}

function setStatus(text) {
  if (anim.status) anim.status.textContent = text;
}

async function play(ctx) {
  if (anim.pending) return;
  anim.pending = true;
  setStatus("Playing an episode with the current policy…");
  try {
    const ep = await ctx.call("episode", { greedy });
    anim.ep = ep;
    anim.t0 = performance.now();
    if (anim.status) anim.status.dataset.return = String(ep.return);
    setStatus(`Playing: ${ep.greedy ? "greedy" : "sampled"} actions, policy after training step ${ep.step}…`);
    if (!anim.raf) anim.raf = requestAnimationFrame(tick);
  } catch (e) {
    setStatus(`Could not play an episode: ${e.message || e}`);
  } finally {
    anim.pending = false;
  }
}

/** Play the newest policy once, when training is not running (the worker is free). */
function autoPlay(ctx, at) {
  clearTimeout(autoTimer);
  if (autoFor === at) return;
  if (ctx.running || anim.pending) { autoTimer = setTimeout(() => autoPlay(ctx, at), 500); return; }
  autoFor = at;
  play(ctx);
}

function niceStep(span, most) {
  const raw = span / most || 1, p = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map((m) => m * p).find((v) => v >= raw);
}

/** Mean return of the training episodes against the training step, the goal dashed. */
function drawReturns(c, steps, returns, evaluated) {
  const [g, w, h] = sized(c, 200);
  const pad = { l: 38, r: 12, t: 14, b: 24 };
  const x0 = steps.length ? Math.min(0, steps[0]) : 0, x1 = Math.max(steps[steps.length - 1] || 0, 10);
  const X = (s) => pad.l + (w - pad.l - pad.r) * (s - x0) / (x1 - x0);
  const Y = (r) => pad.t + (h - pad.t - pad.b) * (1 - r / 210);
  g.font = "11px system-ui, sans-serif"; g.lineWidth = 1;
  g.strokeStyle = css("--grid"); g.fillStyle = css("--muted"); g.textAlign = "right"; g.textBaseline = "middle";
  for (const r of [0, 50, 100, 150, 200]) {
    const y = Math.round(Y(r)) + 0.5;
    g.beginPath(); g.moveTo(pad.l, y); g.lineTo(w - pad.r, y); g.stroke();
    g.fillText(String(r), pad.l - 5, y);
  }
  g.textAlign = "center"; g.textBaseline = "top";
  const st = niceStep(x1 - x0, 8);
  for (let s = 0; s <= x1 + 1e-9; s += st) g.fillText(String(s), X(s), h - pad.b + 5);
  g.strokeStyle = css("--muted-strong"); g.setLineDash([5, 4]);
  g.beginPath(); g.moveTo(pad.l, Y(195)); g.lineTo(w - pad.r, Y(195)); g.stroke(); g.setLineDash([]);
  g.textAlign = "left"; g.textBaseline = "bottom"; g.fillStyle = css("--muted-strong");
  g.fillText("goal 195", pad.l + 6, Y(195) - 2);
  if (steps.length) {
    g.strokeStyle = css("--accent"); g.lineWidth = 2; g.beginPath();
    steps.forEach((s, i) => (i ? g.lineTo(X(s), Y(returns[i])) : g.moveTo(X(s), Y(returns[i]))));
    g.stroke();
    if (steps.length === 1) { g.fillStyle = css("--accent"); g.fillRect(X(steps[0]) - 2, Y(returns[0]) - 2, 4, 4); }
  }
  if (evaluated != null && steps.length) {
    g.fillStyle = css("--accent"); g.beginPath(); g.arc(X(steps[steps.length - 1]), Y(evaluated), 4, 0, 2 * Math.PI); g.fill();
  }
  g.fillStyle = css("--muted"); g.textAlign = "right"; g.textBaseline = "top";
  g.fillText(steps.length ? "mean return of each step's 16 episodes · dot: 100-episode evaluation" : "no training steps yet",
    w - pad.r, pad.t);
}

export function render(body, view, ctx) {
  const v = view.cartpole;
  if (!v) { ctx.parts(body, view); return; }
  const h = document.createElement("h3"); h.textContent = "An episode with the current policy";
  const scene = makeCanvas("the cart and pole, animated through an episode played by the current policy", "cp-scene");
  const bar = document.createElement("div");
  Object.assign(bar.style, { display: "flex", gap: ".7rem", alignItems: "center", margin: ".5rem 0 1rem", flexWrap: "wrap" });
  const btn = document.createElement("button");
  btn.type = "button"; btn.id = "cp-play"; btn.textContent = "Play an episode";
  btn.addEventListener("click", () => play(ctx));
  const lab = document.createElement("label");
  const box = document.createElement("input");
  box.type = "checkbox"; box.id = "cp-greedy"; box.checked = greedy;
  box.addEventListener("change", () => { greedy = box.checked; });
  lab.append(box, " greedy (always the more probable push)");
  const status = document.createElement("p");
  status.id = "cp-status"; status.className = "muted"; status.setAttribute("aria-live", "polite");
  status.style.margin = "0";
  const last = anim.status ? anim.status.textContent : "";
  const lastReturn = anim.status ? anim.status.dataset.return : undefined;
  status.textContent = last || "Press “Play an episode” to watch the policy balance.";
  if (lastReturn !== undefined) status.dataset.return = lastReturn;
  bar.append(btn, lab, status);
  const h2 = document.createElement("h3"); h2.textContent = "Mean return over training";
  const curve = makeCanvas("mean return of the training episodes at each step, against the goal of 195", "cp-returns");
  body.append(h, scene, bar, h2, curve);
  anim.canvas = scene; anim.status = status;
  if (anim.ep) {
    const i = frameAt(performance.now());
    drawScene(scene, anim.ep, i);
    if (i < anim.ep.x.length - 1 && !anim.raf) anim.raf = requestAnimationFrame(tick);
  } else drawScene(scene, null, 0);
  drawReturns(curve, v.steps, v.returns, v.evaluated);
  autoPlay(ctx, v.at);
}
