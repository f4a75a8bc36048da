// The nerf sample's view: the target picture, the network's reconstruction and their
// difference, side by side, and a drop zone: drop an image file (or choose one) and it
// is cropped to its centred square, scaled to 64×64 here, and handed to the page
// script's set_image(pixels, name), which makes it the training target. A run in
// progress is stopped for the switch and started again, so training goes on on the new
// picture. show() in page/samples/nerf.py sends view.nerf: {side, target, recon, source}
// (RGB bytes, row-major).

let message = "";        // the last thing the drop zone said, kept across re-renders
let messageKind = "";    // "" | "busy" | "error"
let switching = false;   // a set_image / use_builtin call is under way
let shown = null;        // the view last rendered: a message re-renders it, not an older one

function paint(canvas, side, rgb) {
  canvas.width = side; canvas.height = side;
  const g = canvas.getContext("2d"), img = g.createImageData(side, side);
  for (let i = 0; i < side * side; i++) {
    img.data[4 * i] = rgb[3 * i]; img.data[4 * i + 1] = rgb[3 * i + 1];
    img.data[4 * i + 2] = rgb[3 * i + 2]; img.data[4 * i + 3] = 255;
  }
  g.putImageData(img, 0, 0);
}

function figure(caption, aria, side, rgb, name) {
  const f = document.createElement("figure");
  f.style.margin = "0"; f.style.textAlign = "center";
  const c = document.createElement("canvas");
  c.className = `nerf-${name}`;
  c.setAttribute("role", "img");
  c.setAttribute("aria-label", aria);
  Object.assign(c.style, { width: "100%", maxWidth: "220px", aspectRatio: "1", imageRendering: "pixelated",
    borderRadius: "6px", border: "1px solid var(--line)", display: "block", margin: "0 auto" });
  paint(c, side, rgb);
  const cap = document.createElement("figcaption");
  cap.textContent = caption;
  cap.style.fontSize = ".85rem"; cap.style.color = "var(--muted-strong)"; cap.style.marginTop = ".25rem";
  f.append(c, cap);
  return f;
}

/** 64×64 RGB bytes of an image file: its centred square, scaled, over white. */
export async function filePixels(file, side = 64) {
  if (!file || !/^image\//.test(file.type || "")) {
    throw new Error(`${file ? file.name || "that file" : "nothing"} is not an image (PNG, JPEG, GIF, WebP …)`);
  }
  let bmp;
  try {
    bmp = await createImageBitmap(file);
  } catch {
    throw new Error(`${file.name || "the file"} could not be decoded as an image`);
  }
  const c = document.createElement("canvas");
  c.width = side; c.height = side;
  const g = c.getContext("2d");
  g.fillStyle = "#fff";
  g.fillRect(0, 0, side, side);
  g.imageSmoothingEnabled = true;
  g.imageSmoothingQuality = "high";
  const s = Math.min(bmp.width, bmp.height);
  g.drawImage(bmp, (bmp.width - s) / 2, (bmp.height - s) / 2, s, s, 0, 0, side, side);
  bmp.close();
  const d = g.getImageData(0, 0, side, side).data, out = new Array(side * side * 3);
  for (let i = 0; i < side * side; i++) {
    out[3 * i] = d[4 * i]; out[3 * i + 1] = d[4 * i + 1]; out[3 * i + 2] = d[4 * i + 2];
  }
  return out;
}

/** Call the page script's fn (set_image or use_builtin); a run in progress is stopped
 * for it and started again afterwards. */
async function switchTarget(ctx, fn, kwargs, label, rerender) {
  if (switching) return;
  switching = true;
  message = `${label}…`; messageKind = "busy"; rerender();
  const wasRunning = ctx.running;
  try {
    if (wasRunning) document.getElementById("stop")?.click();
    const r = await ctx.call(fn, kwargs);
    message = `Training target: ${r.source} (from step ${r.steps}).`;
    messageKind = "";
    if (wasRunning) document.getElementById("start")?.click();
  } catch (e) {
    message = String(e.message || e).split("\n").filter(Boolean).pop();
    messageKind = "error";
  } finally {
    switching = false;
    rerender();
  }
}

async function takeFile(ctx, file, rerender) {
  let pixels;
  try {
    pixels = await filePixels(file);
  } catch (e) {
    message = e.message; messageKind = "error"; rerender();
    return;
  }
  await switchTarget(ctx, "set_image", { pixels, name: file.name || "your image" }, `Loading ${file.name}`, rerender);
}

export function render(body, view, ctx) {
  const n = view.nerf;
  if (!n) { ctx.parts(body, view); return; }
  shown = view;
  // draw the latest view again (a new one may have come while a call was under way)
  const rerender = () => ctx.setView(shown);

  const row = document.createElement("div");
  row.className = "nerf-images";
  Object.assign(row.style, { display: "grid", gridTemplateColumns: "repeat(3, minmax(0, 1fr))", gap: ".6rem" });
  const diff = n.target.map((t, i) => Math.min(255, 4 * Math.abs(t - n.recon[i])));
  row.append(
    figure(`target (${n.source})`, `the target picture: ${n.source}`, n.side, n.target, "target"),
    figure("reconstruction", "the network's reconstruction of the target", n.side, n.recon, "recon"),
    figure("difference ×4", "the difference between target and reconstruction, four times brighter",
      n.side, diff, "diff"),
  );

  const zone = document.createElement("div");
  zone.className = "nerf-drop";
  zone.setAttribute("role", "group");
  zone.setAttribute("aria-label", "choose the picture to learn");
  Object.assign(zone.style, { marginTop: ".8rem", padding: ".7rem .8rem", border: "2px dashed var(--line)",
    borderRadius: "8px", display: "flex", flexWrap: "wrap", gap: ".6rem", alignItems: "center" });
  const hint = document.createElement("span");
  hint.textContent = "Drop an image here to learn it instead (its centred square, at 64×64), or";
  const input = document.createElement("input");
  input.type = "file"; input.accept = "image/*"; input.className = "nerf-file";
  input.setAttribute("aria-label", "choose an image to learn");
  input.addEventListener("change", () => {
    const f = input.files && input.files[0];
    if (f) takeFile(ctx, f, rerender);
  });
  const builtin = document.createElement("button");
  builtin.type = "button"; builtin.className = "nerf-builtin";
  builtin.textContent = "Use the built-in picture";
  builtin.disabled = n.source === "built-in" || switching;
  builtin.addEventListener("click", () => switchTarget(ctx, "use_builtin", {}, "Back to the built-in picture", rerender));
  zone.append(hint, input, builtin);
  const over = (on) => {
    zone.style.borderColor = on ? "var(--accent)" : "var(--line)";
    zone.style.background = on ? "var(--accent-bg)" : "";
  };
  for (const target of [zone, row]) {
    target.addEventListener("dragover", (ev) => { ev.preventDefault(); ev.dataTransfer.dropEffect = "copy"; over(true); });
    target.addEventListener("dragleave", () => over(false));
    target.addEventListener("drop", (ev) => {
      ev.preventDefault();
      over(false);
      const f = ev.dataTransfer && ev.dataTransfer.files && ev.dataTransfer.files[0];
      if (f) takeFile(ctx, f, rerender);
      else { message = "That drop held no file."; messageKind = "error"; rerender(); }
    });
  }

  const status = document.createElement("p");
  status.className = "nerf-status";
  status.setAttribute("role", "status");
  status.setAttribute("aria-live", "polite");
  status.textContent = message;
  Object.assign(status.style, { margin: ".5rem 0 0", fontSize: ".85rem", minHeight: "1.2em",
    color: messageKind === "error" ? "var(--err)" : "var(--muted)" });

  body.append(row, zone, status);
  ctx.parts(body, { ...view, nerf: undefined });
}
