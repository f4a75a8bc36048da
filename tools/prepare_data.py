"""Prepare the small derived data files of the digits and names samples.

Writes, under tgweb/samples/data/:

- digits.bin: the 1,797 8x8 images of scikit-learn's bundled digits (the UCI
  optdigits test set): 1797 * 64 pixel bytes (values 0..16, row-major, image
  after image), then 1797 label bytes (0..9). 116,805 bytes.
- names.txt: the first names of the `names` package (its US-census lists
  dist.male.first and dist.female.first), lower-cased, deduplicated, sorted,
  one per line.

The files are committed; this script only documents and repeats how they were
made. It needs scikit-learn and names installed (pip install scikit-learn names),
which nothing else in tgweb needs. Run from the repository root:

    python tools/prepare_data.py          # write the files
    python tools/prepare_data.py --check  # verify the committed files match
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tgweb", "samples", "data")


def digits_bytes() -> bytes:
    from sklearn.datasets import load_digits

    d = load_digits()
    images, labels = d.data, d.target
    if images.shape != (1797, 64) or labels.shape != (1797,):
        raise SystemExit(f"unexpected digits shapes {images.shape}, {labels.shape}")
    pixels = [int(v) for v in images.reshape(-1)]
    if min(pixels) < 0 or max(pixels) > 16 or any(float(v) != int(v) for v in images.reshape(-1)):
        raise SystemExit("digits pixels are not integers in 0..16")
    return bytes(pixels) + bytes(int(v) for v in labels)


def names_text() -> bytes:
    import names

    seen = set()
    for key in ("first:male", "first:female"):
        with open(names.FILES[key], encoding="ascii") as f:
            for line in f:
                if line.strip():
                    seen.add(line.split()[0].lower())
    bad = sorted(n for n in seen if not n.isascii() or not n.isalpha())
    if bad:
        raise SystemExit(f"names outside a-z: {bad[:10]}")
    return "".join(n + "\n" for n in sorted(seen)).encode("ascii")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed files")
    args = ap.parse_args(argv)
    files = {"digits.bin": digits_bytes(), "names.txt": names_text()}
    status = 0
    for name, data in files.items():
        path = os.path.join(DATA, name)
        digest = hashlib.sha256(data).hexdigest()
        if args.check:
            with open(path, "rb") as f:
                same = f.read() == data
            print(f"{name}: {'matches' if same else 'DIFFERS'} ({len(data)} bytes, sha256 {digest})")
            status |= not same
        else:
            os.makedirs(DATA, exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
            print(f"wrote {path} ({len(data)} bytes, sha256 {digest})")
    return status


if __name__ == "__main__":
    sys.exit(main())
