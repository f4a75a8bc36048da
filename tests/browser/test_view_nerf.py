"""The nerf view in headless Chromium: an image dropped on it (a PNG made here, in a
DataTransfer) becomes the target shown and trained on, also in the middle of a run; a
file that is not an image is refused with a message; the built-in picture comes back."""

from __future__ import annotations

import base64
import struct
import zlib

from .conftest import losses, screenshot, train_app


def png(width: int, height: int, pixel) -> bytes:
    """An RGB PNG whose pixel (x, y) is pixel(x, y) -> (r, g, b)."""
    raw = b"".join(b"\0" + bytes(c for x in range(width) for c in pixel(x, y)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    )


# 120 x 80: the centred 80 x 80 square is red on its left half, blue on its right; the
# 20-pixel margins cropped away are green, so a wrong crop shows
SPLIT = png(
    120, 80, lambda x, y: (0, 200, 0) if x < 20 or x >= 100 else (230, 20, 20) if x < 60 else (20, 40, 220)
)

DROP = """async ([b64, name, type]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const dt = new DataTransfer();
  dt.items.add(new File([bytes], name, { type }));
  const zone = document.querySelector("#view-body .nerf-drop");
  zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
  zone.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
}"""

# mean RGB of the left and right quarter columns of a view canvas
HALVES = """(cls) => {
  const c = document.querySelector(`#view-body canvas.${cls}`);
  const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  const mean = (x0, x1) => {
    const s = [0, 0, 0]; let n = 0;
    for (let y = 0; y < c.height; y++) for (let x = x0; x < x1; x++) {
      const i = 4 * (y * c.width + x); s[0] += d[i]; s[1] += d[i + 1]; s[2] += d[i + 2]; n++;
    }
    return s.map((v) => v / n);
  };
  return [mean(0, c.width / 4), mean(3 * c.width / 4, c.width)];
}"""


def figure(page, name: str) -> str:
    return page.inner_text(f'#view-figures dd[data-name="{name}"]')


SAMPLE = "nerf"  # the page opens at it (conftest.app)


def drop(page, data: bytes, name: str, kind: str = "image/png"):
    page.evaluate(DROP, [base64.b64encode(data).decode(), name, kind])


def test_a_dropped_image_becomes_the_target_and_training_continues_on_it(app):
    page = app
    train_app(page, 20, timeout=240)
    assert figure(page, "target") == "built-in"
    before = page.evaluate(HALVES, "nerf-target")
    drop(page, SPLIT, "split.png")
    page.wait_for_function(
        "document.querySelector('#view-figures dd[data-name=\"target\"]')?.textContent === 'split.png'",
        timeout=60000,
    )
    assert "split.png" in page.inner_text("#view-body .nerf-status")
    (lr, lg, lb), (rr, rg, rb) = page.evaluate(HALVES, "nerf-target")
    assert lr > 200 and lg < 40 and lb < 40, (lr, lg, lb)  # the cropped square: red left,
    assert rb > 200 and rr < 40 and rg < 60, (rr, rg, rb)  # blue right, no green margin
    assert page.evaluate(HALVES, "nerf-target") != before
    step0 = len(losses(page, "nerf"))
    psnr0 = float(figure(page, "PSNR (dB)"))
    train_app(page, 60, timeout=240)
    got = losses(page, "nerf")
    assert len(got) >= step0 + 60 and got[-1][0] > got[step0 - 1][0]
    psnr1 = float(figure(page, "PSNR (dB)"))
    assert psnr1 > psnr0 + 3, (psnr0, psnr1)  # it learns the new picture
    (lr, _, lb), (rr, _, rb) = page.evaluate(HALVES, "nerf-recon")
    assert lr > lb + 60 and rb > rr + 60, "the reconstruction is not red | blue yet"
    screenshot(page, "nerf-dropped")
    assert not [p for p in page.problems if "pageerror" in p], page.problems


def test_a_drop_during_a_run_switches_and_the_run_goes_on(app):
    page = app
    page.click("#view-body .nerf-builtin")
    page.wait_for_function(
        "document.querySelector('#view-figures dd[data-name=\"target\"]')?.textContent === 'built-in'",
        timeout=60000,
    )
    page.fill("#steps", "100000")
    page.dispatch_event("#steps", "change")
    page.click("#start")
    page.wait_for_function("document.body.dataset.state === 'running'", timeout=10000)
    page.wait_for_function("window.app.state.nerf.losses.length > 0", timeout=30000)
    checker = png(64, 64, lambda x, y: (255, 255, 255) if (x // 16 + y // 16) % 2 else (10, 10, 10))
    drop(page, checker, "checker.png")
    page.wait_for_function(
        "document.querySelector('#view-figures dd[data-name=\"target\"]')?.textContent === 'checker.png'",
        timeout=120000,
    )
    page.wait_for_function("document.body.dataset.state === 'running'", timeout=30000)
    n = len(losses(page, "nerf"))
    page.wait_for_function(f"window.app.state.nerf.losses.length > {n + 5}", timeout=60000)
    page.click("#stop")
    page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60000)
    assert figure(page, "target") == "checker.png"


def test_a_file_that_is_not_an_image_is_refused(app):
    page = app
    target = figure(page, "target")
    drop(page, b"just some words", "notes.txt", "text/plain")
    page.wait_for_function(
        "document.querySelector('#view-body .nerf-status').textContent.includes('not an image')",
        timeout=10000,
    )
    drop(page, b"\x89PNG but broken", "broken.png")
    page.wait_for_function(
        "document.querySelector('#view-body .nerf-status').textContent.includes('could not be decoded')",
        timeout=10000,
    )
    assert figure(page, "target") == target


def test_an_image_chosen_with_the_file_input_becomes_the_target(app):
    page = app
    green = png(64, 64, lambda x, y: (30, 180, 60))
    page.set_input_files(
        "#view-body .nerf-file", files=[{"name": "green.png", "mimeType": "image/png", "buffer": green}]
    )
    page.wait_for_function(
        "document.querySelector('#view-figures dd[data-name=\"target\"]')?.textContent === 'green.png'",
        timeout=60000,
    )
    (lr, lg, lb), _ = page.evaluate(HALVES, "nerf-target")
    assert (round(lr), round(lg), round(lb)) == (30, 180, 60)
