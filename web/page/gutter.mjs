// The editor's line numbers. The source wraps its long lines (nothing is clipped), so a
// line can take several rows: a hidden copy of the text, as wide as the editor's, gives
// each line's height, and its number gets that height in the gutter.

function measure(ta) {
  let m = document.getElementById("source-measure");
  if (!m) {
    m = document.createElement("div");
    m.id = "source-measure";
    m.setAttribute("aria-hidden", "true");
    ta.parentElement.append(m);
  }
  const cs = getComputedStyle(ta);
  m.style.cssText = "position:absolute;visibility:hidden;left:-99999px;top:0;white-space:pre-wrap;" +
    `overflow-wrap:anywhere;font:${cs.font};tab-size:${cs.tabSize};` +
    `width:${ta.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)}px`;
  return m;
}

/** Each source line's top and height (px) as the editor shows them. */
export function lineBoxes(ta) {
  const m = measure(ta);
  m.replaceChildren(...ta.value.split("\n").map((text) => {
    const d = document.createElement("div");
    d.textContent = text || "\u200b";
    return d;
  }));
  const top = m.getBoundingClientRect().top;  // fractional: rounded heights would drift
  return Array.from(m.children, (d) => {
    const r = d.getBoundingClientRect();
    return [r.top - top, r.height];
  });
}

/** Numbers for every line of ta in gutter, errLine (1-based) marked. */
export function renderGutter(gutter, ta, errLine) {
  gutter.replaceChildren(...lineBoxes(ta).map(([, h], i) => {
    const n = document.createElement(i + 1 === errLine ? "b" : "span");
    n.textContent = String(i + 1);
    n.style.height = `${h}px`;
    return n;
  }));
  gutter.scrollTop = ta.scrollTop;
}
