"""`build.py serve`'s server (build.make_server) and the bundle's precompressed files: a file
with NAME.zst and NAME.gz beside it goes zstd-compressed, with Content-Encoding and Vary, to a
client that accepts zstd, else gzip-compressed to one that accepts gzip; a client that takes
neither (no Accept-Encoding, or each with q=0) gets the file itself; a revalidation (304) and
a file without them carry no Content-Encoding."""

from __future__ import annotations

import email.utils
import gzip
from pathlib import Path

import pytest
import zstandard
from conftest import http_get, load_build, serving

ROOT = Path(__file__).resolve().parents[1]


build = load_build()
WASM = bytes(range(256)) * 64 + b"\0" * 20000  # compresses well
SMALL = b"export const x = 1;\n"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "pyodide").mkdir()
    (site / "pyodide" / "pyodide.asm.wasm").write_bytes(WASM)
    (site / "small.mjs").write_bytes(SMALL)
    (site / "data.zip").write_bytes(WASM)  # a kind COMPRESS does not name: never precompressed
    (site / "wheel.whl").write_bytes(WASM)  # the site's wheel, its files stored: gzip on the wire
    build._precompress(site)
    with serving(site) as port:
        yield site, port


def unzstd(data: bytes) -> bytes:
    return zstandard.ZstdDecompressor().decompress(data)


def test_the_bundle_carries_zstd_and_gzip_beside_what_compresses(server):
    site, _ = server
    for name in ("pyodide/pyodide.asm.wasm", "wheel.whl"):
        assert gzip.decompress((site / f"{name}.gz").read_bytes()) == WASM
        assert unzstd((site / f"{name}.zst").read_bytes()) == WASM
    for suffix in (".gz", ".zst"):
        assert not (site / f"small.mjs{suffix}").exists()  # under 1 KiB: not worth a second file
        assert not (site / f"data.zip{suffix}").exists()


ZSTD = ["gzip, deflate, br, zstd", "zstd", "*", "gzip;q=0.5, zstd;q=0.5", "gzip;q=0.5, *"]
GZIP = ["br;q=1.0, gzip;q=0.5", "gzip, zstd;q=0", "GZIP", "gzip, zstd;q=x", "zstd;q=0.1, gzip;q=0.5"]


@pytest.mark.parametrize(("accept", "coding"), [(a, "zstd") for a in ZSTD] + [(a, "gzip") for a in GZIP])
def test_a_client_gets_zstd_where_it_takes_it_else_gzip(server, accept, coding):
    site, port = server
    status, h, body = http_get(port, "/pyodide/pyodide.asm.wasm", **{"Accept-Encoding": accept})
    assert status == 200
    assert h["content-encoding"] == coding and h["vary"] == "Accept-Encoding"
    assert h["content-type"] == "application/wasm"  # the file's type, not the coding's
    assert int(h["content-length"]) == len(body) < len(WASM)
    assert (unzstd(body) if coding == "zstd" else gzip.decompress(body)) == WASM
    # the cross-origin isolation headers are still there
    assert h["cross-origin-embedder-policy"] == "require-corp" and h["cache-control"] == "no-cache"


def test_the_jupyterlite_site_is_not_cross_origin_isolated(server):
    site, port = server
    (site / "lite").mkdir(exist_ok=True)
    (site / "lite" / "index.html").write_bytes(b"<!doctype html>")
    status, h, body = http_get(port, "/lite/index.html")
    assert status == 200 and body == b"<!doctype html>" and h["cache-control"] == "no-cache"
    assert "cross-origin-embedder-policy" not in h and "cross-origin-opener-policy" not in h
    status, h, _ = http_get(port, "/small.mjs")
    assert (
        h["cross-origin-embedder-policy"] == "require-corp"
        and h["cross-origin-opener-policy"] == "same-origin"
    )


@pytest.mark.parametrize("accept", [None, "identity", "gzip;q=0", "br", "gzip;q=x", "zstd;q=0, gzip;q=0"])
def test_a_client_that_takes_neither_gets_the_plain_file(server, accept):
    _, port = server
    headers = {"Accept-Encoding": accept} if accept else {}
    status, h, body = http_get(port, "/pyodide/pyodide.asm.wasm", **headers)
    assert status == 200 and body == WASM
    assert "content-encoding" not in h and h["vary"] == "Accept-Encoding"
    assert int(h["content-length"]) == len(WASM) and h["content-type"] == "application/wasm"


def test_head_revalidation_and_plain_files(server):
    site, port = server
    status, h, body = http_get(port, "/pyodide/pyodide.asm.wasm", "HEAD", **{"Accept-Encoding": "gzip"})
    assert status == 200 and body == b"" and h["content-encoding"] == "gzip"
    assert int(h["content-length"]) == (site / "pyodide" / "pyodide.asm.wasm.gz").stat().st_size
    status, h, body = http_get(port, "/pyodide/pyodide.asm.wasm", "HEAD", **{"Accept-Encoding": "zstd"})
    assert status == 200 and body == b"" and h["content-encoding"] == "zstd"
    assert int(h["content-length"]) == (site / "pyodide" / "pyodide.asm.wasm.zst").stat().st_size
    since = email.utils.formatdate(
        (site / "pyodide" / "pyodide.asm.wasm.gz").stat().st_mtime + 10, usegmt=True
    )
    status, h, body = http_get(
        port, "/pyodide/pyodide.asm.wasm", **{"Accept-Encoding": "gzip", "If-Modified-Since": since}
    )
    assert status == 304 and body == b"" and "content-encoding" not in h and h["vary"] == "Accept-Encoding"
    status, h, body = http_get(port, "/small.mjs", **{"Accept-Encoding": "gzip"})
    assert status == 200 and body == SMALL and "content-encoding" not in h and "vary" not in h
    assert h["content-type"] == "text/javascript"
    status, h, _ = http_get(port, "/nothing.wasm", **{"Accept-Encoding": "gzip"})
    assert status == 404 and "content-encoding" not in h


def _imported(text: str, filename: str) -> set[str]:
    """The top-level names of every module a Python source imports, anywhere in it."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(text, filename)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_trimmed_standard_library_has_what_tgweb_and_micropip_import():
    import zipfile

    sources = [*(ROOT / "tgweb").rglob("*.py"), *(ROOT / "web" / "page").rglob("*.py")]
    got = {p.relative_to(ROOT).as_posix(): _imported(p.read_text(), str(p)) for p in sources}
    for name in build.PYODIDE_WHEELS:  # micropip and packaging, which a page may load
        with zipfile.ZipFile(build._pyodide_wheel(name)) as z:
            for n in z.namelist():
                if n.endswith(".py"):
                    got[n] = _imported(z.read(n).decode(), n)
    dropped = {f: sorted(names & build.STDLIB_DROP) for f, names in got.items() if names & build.STDLIB_DROP}
    assert not dropped, dropped
    assert len(got) > 100 and "tgweb/worker.py" in got
    # the trimmed zip: what stdlib_kept says, the rest as Pyodide has it
    src = ROOT / "node_modules" / "pyodide" / "python_stdlib.zip"
    if not src.exists():
        pytest.skip("node_modules/pyodide is not installed")
    with zipfile.ZipFile(src) as z:
        names = z.namelist()
    kept = [n for n in names if build.stdlib_kept(n)]
    assert "encodings/utf_8.py" in kept and "encodings/cp437.py" in kept and "asyncio/__init__.py" in kept
    assert "encodings/cp1251.py" not in kept and not [
        n for n in kept if n.startswith(("multiprocessing/", "sqlite3/", "xmlrpc/"))
    ]
    assert "pdb.py" in kept and "unittest/__init__.py" in kept  # IPython imports them
    assert "email/parser.py" in kept and "zipfile/__init__.py" in kept


def _module_level_imports(text: str, package: str) -> set[str]:
    """The modules (dotted, absolute) that a module's body imports unguarded: the import
    statements at column 0 (not in a function, class, `try` or `if`). Read statement by
    statement, not as one tree: Pyodide's standard library is newer than this Python."""
    import ast

    out, lines = set(), text.splitlines()
    for k, line in enumerate(lines):
        if not line.startswith(("import ", "from ")):
            continue
        stmt = line
        while stmt.count("(") > stmt.count(")") or stmt.endswith("\\"):
            k += 1
            stmt += "\n" + lines[k]
        try:
            node = ast.parse(stmt).body[0]
        except SyntaxError:  # a docstring's line of prose that starts so
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
            continue
        base = node.module or ""
        if node.level:  # relative: from the module's package up
            parts = package.split(".")
            up = parts[: len(parts) - node.level + 1]
            base = ".".join([*up, base] if base else up)
        out.add(base)
        out |= {f"{base}.{a.name}" for a in node.names}  # `from pkg import submodule`
    return out


def test_no_kept_stdlib_module_imports_a_dropped_one_at_its_top():
    """The trimmed standard library is closed under unguarded module-level imports: a kept
    module never fails on import for lack of a dropped one (pydoc imports _pyrepl's pager,
    and IPython imports pydoc: without it JupyterLite's kernel started no cell)."""
    import zipfile

    src = ROOT / "node_modules" / "pyodide" / "python_stdlib.zip"
    if not src.exists():
        pytest.skip("node_modules/pyodide is not installed")
    with zipfile.ZipFile(src) as z:
        sources = {n: z.read(n).decode() for n in z.namelist() if n.endswith(".py")}
    modules = {n.removesuffix(".py").removesuffix("/__init__").replace("/", "."): n for n in sources}
    missing = {}
    for name, text in sources.items():
        if build.stdlib_kept(name):
            module = name.removesuffix(".py").replace("/", ".")
            package = (
                module.removesuffix(".__init__")
                if name.endswith("__init__.py")
                else module.rpartition(".")[0]
            )
            lacks = [m for m in _module_level_imports(text, package) if m in modules]
            lacks = sorted(m for m in lacks if not build.stdlib_kept(modules[m]))
            if lacks:
                missing[name] = lacks
    assert not missing, missing
    assert "from _pyrepl.pager import" in sources["pydoc.py"] and build.stdlib_kept("_pyrepl/pager.py")
    assert not build.stdlib_kept("_pyrepl/reader.py") and not build.stdlib_kept("multiprocessing/__init__.py")
