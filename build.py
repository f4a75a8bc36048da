#!/usr/bin/env python3
"""The project's one tool: set-up, bundle, serve, test, bench.

    python3 build.py setup          install everything (venv, pip, Debian, npm)
    python3 build.py test [ARGS]    setup, then the whole test suite (pytest ARGS)
    python3 build.py serve [--port N]   setup, bundle the site, serve it on 127.0.0.1

Everything it installs is pinned here so that a fresh machine gets the same.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"

PIP_PACKAGES = [
    "numpy>=1.26",
    "pytest>=8",
    "pytest-timeout",
    "hypothesis>=6",
    "wgpu==0.31.0",
    "playwright==1.55.0",
    "safetensors",
    "tqdm",
    "ruff",
    "torch==2.13.0",
]
DEBIAN_PACKAGES = ["chromium", "mesa-vulkan-drivers", "libvulkan1"]


def run(cmd: list[str], **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def _missing_debian() -> list[str]:
    out = []
    for p in DEBIAN_PACKAGES:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        if "install ok installed" not in r.stdout:
            out.append(p)
    return out


def setup() -> None:
    missing = _missing_debian()
    if missing:
        if os.geteuid() != 0:
            sys.exit(f"please install the Debian packages {missing} (needs root)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-q"], env=env)
        run(["apt-get", "install", "-y", "-q", *missing], env=env)
    if not PY.exists():
        run([sys.executable, "-m", "venv", VENV])
    stamp = VENV / ".installed"
    want = "\n".join(PIP_PACKAGES)
    if not stamp.exists() or stamp.read_text() != want:
        run([PY, "-m", "pip", "install", "-q", *PIP_PACKAGES])
        stamp.write_text(want)
    run([PY, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", ROOT])
    if (ROOT / "package.json").exists():
        lock = ROOT / "node_modules" / ".package-lock.json"
        if not lock.exists() or lock.stat().st_mtime < (ROOT / "package-lock.json").stat().st_mtime:
            run(["npm", "ci", "--no-audit", "--no-fund"], cwd=ROOT)


def test(args: list[str]) -> int:
    setup()
    bundle_site()
    return subprocess.run([str(PY), "-m", "pytest", *args], cwd=ROOT).returncode


def bundle_site() -> None:
    """Assemble the served site (filled in by the browser work)."""
    site = ROOT / "site"
    site.mkdir(exist_ok=True)
    for f in (ROOT / "web").rglob("*"):
        if f.is_file():
            dst = site / f.relative_to(ROOT / "web")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)


def serve(args: list[str]) -> None:
    import functools
    import http.server

    setup()
    bundle_site()
    port = 8000
    if "--port" in args:
        port = int(args[args.index("--port") + 1])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(ROOT / "site"))
    handler.func.extensions_map.update({".mjs": "text/javascript", ".wasm": "application/wasm"})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    print(f"serving the tgweb trainer at http://127.0.0.1:{port}/", flush=True)
    srv.serve_forever()


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "setup":
        setup()
    elif cmd == "test":
        return test(rest)
    elif cmd == "serve":
        serve(rest)
    else:
        print(f"unknown command {cmd!r}\n{__doc__}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
