// The parts of a sample's view that every sample can use, drawn from the plain data its
// show() emits as a "view" event: figures (name -> number or text), a curve, heatmaps,
// images and lines of text. A sample with a view of its own (page/views/<name>.mjs)
// draws the rest itself and calls renderParts for these.
import { drawCurve, drawHeat, fmt } from "./charts.mjs";

export { css, hidpi } from "./charts.mjs";

/** A DOM element: props set as properties, except style (cssText) and aria-*, data-*,
 * role and for (attributes); kids appended. */
export function el(tag, props = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "style") e.style.cssText = v;
    else if (k.startsWith("aria-") || k.startsWith("data-") || k === "role" || k === "for") e.setAttribute(k, v);
    else e[k] = v;
  }
  e.append(...kids);
  return e;
}

/** The view's figures as <div><dt>name</dt><dd data-name=name>value</dd></div> in figs. */
export function renderFigures(figs, v) {
  for (const [k, val] of Object.entries(v.figures || {})) {
    const d = document.createElement("div");
    const dt = document.createElement("dt"); dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = typeof val === "number" ? (Number.isInteger(val) ? String(val) : fmt(val)) : String(val);
    dd.dataset.name = k;
    d.append(dt, dd);
    figs.append(d);
  }
}

/** The view's curve, heatmaps, images and text, appended to body. */
export function renderParts(body, v) {
  if (v.curve) {
    const c = document.createElement("canvas");
    c.className = "curve";
    c.setAttribute("role", "img");
    c.setAttribute("aria-label", "the model's fit: " + Object.keys(v.curve.series).join(" and "));
    body.append(c);
    drawCurve(c, v.curve);
  }
  if (v.heatmaps) {
    const box = document.createElement("div");
    box.className = "heat";
    const t = document.createElement("p"); t.className = "muted"; t.textContent = v.heatmaps.title || "";
    box.append(t);
    const row = document.createElement("div"); row.className = "heat-row";
    v.heatmaps.maps.forEach((m, k) => {
      const f = document.createElement("figure");
      const c = document.createElement("canvas");
      c.setAttribute("role", "img");
      c.setAttribute("aria-label", (v.heatmaps.names || [])[k] || `map ${k}`);
      drawHeat(c, m, v.heatmaps.ticks || [], 132);
      const cap = document.createElement("figcaption");
      cap.textContent = (v.heatmaps.names || [])[k] || "";
      f.append(c, cap);
      row.append(f);
    });
    box.append(row);
    body.append(box);
  }
  if (v.images) {
    const grid = document.createElement("div");
    grid.className = "images";
    const { side, pixels, labels = [], ok = [] } = v.images;
    pixels.forEach((px, k) => {
      const f = document.createElement("figure");
      f.className = ok[k] === false ? "bad" : ok[k] === true ? "good" : "";
      const c = document.createElement("canvas");
      c.width = side; c.height = side;
      const g = c.getContext("2d"), img = g.createImageData(side, side);
      px.forEach((p, i) => {
        const val = 255 - Math.round(255 * Math.max(0, Math.min(1, p)));
        img.data.set([val, val, val, 255], i * 4);
      });
      g.putImageData(img, 0, 0);
      c.setAttribute("role", "img");
      c.setAttribute("aria-label", `predicted ${labels[k] ?? "?"}${ok[k] === false ? " (wrong)" : ""}`);
      const cap = document.createElement("figcaption");
      cap.textContent = labels[k] ?? "";
      f.append(c, cap);
      grid.append(f);
    });
    body.append(grid);
  }
  if (v.text) {
    const ul = document.createElement("ul");
    ul.className = "text-list";
    for (const t of v.text) {
      const li = document.createElement("li");
      li.textContent = t;
      ul.append(li);
    }
    body.append(ul);
  }
}
