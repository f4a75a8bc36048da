// The shakespeare sample's view: text drawn from the model character by character. show()
// in page/samples/shakespeare.py sends view.shakespeare = {text, done, step, precision}
// as the characters come back from the GPU, so the text grows on the page as the model
// writes it; precision: what the source's PRECISION chose ("mixed" or "float32").
import { el } from "../view.mjs";

const PRECISIONS = { mixed: "mixed precision (f16 products)", float32: "float32" };

export function render(body, view, ctx) {
  ctx.parts(body, view);
  const s = view.shakespeare;
  if (!s) return;
  const text = el("pre", {
    id: "shakespeare-text", textContent: s.text, "aria-live": "polite",
    "data-step": String(s.step), "data-done": String(s.done),
    style: "white-space:pre-wrap;font:.9rem/1.45 var(--mono);margin:.6rem 0 0;padding:.6rem .8rem;" +
      "background:var(--accent-bg);border-radius:6px;max-height:22rem;overflow:auto",
  });
  if (!s.done) text.append(el("span", { className: "muted", textContent: "▍" }));
  body.append(
    text,
    el("p", { className: "muted", id: "shakespeare-status", style: "margin:.4rem 0 0;font-size:.85rem",
      textContent: `${s.done ? "drawn" : "drawing"} from the model of step ${s.step}, ` +
        "one character at a time (temperature 1)" +
        (s.precision ? `; training in ${PRECISIONS[s.precision] || s.precision}` : "") }));
}
