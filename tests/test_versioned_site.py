"""The site's versioned URLs (build.py's _version_site, web/versioned.mjs, make_server): every
import of one of the site's own modules by another, and the page's two scripts, name the
site's version; Pyodide's own files have a version of their own; the server lets a browser
keep a file asked for at its version for good, and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import http_get, load_build, serving

ROOT = Path(__file__).resolve().parents[1]


build = load_build()

APP = """import { a } from "./a.mjs";
import * as b from '../b.mjs';
export { c } from "./page/c.mjs";
import "./side.mjs";
const p = import("./lazy.mjs");
import { x } from "https://example.com/x.mjs";
const d = await import(someUrl);
const t = fetch("./data.txt");
const s = "./not-an-import.mjs";
"""


def _site(root: Path) -> Path:
    site = root / "site"
    (site / "page").mkdir(parents=True)
    (site / "pyodide").mkdir()
    (site / "index.html").write_text(
        '<link rel="stylesheet" href="app.css">\n<script src="disk-loader.js"></script>\n'
    )
    (site / "app.mjs").write_text(APP)
    (site / "page" / "c.mjs").write_text('import { v } from "../versioned.mjs";\n')
    (site / "versioned.mjs").write_text((ROOT / "web" / "versioned.mjs").read_text())
    for name in [*build.PYODIDE_FILES, "pyodide-lock.json", "micropip-1-py3-none-any.whl"]:
        (site / "pyodide" / name).write_text(f"pyodide's {name}")
    (site / "pyodide" / "tgweb.snapshot").write_text("the site's snapshot")
    (site / "pyscript").mkdir()
    (site / "pyscript" / "core.mjs").write_text('import "./x.mjs";\n')  # not the site's own module
    (site / "manifest.json").write_text(json.dumps({"pyodide": "314.0.8", "built": "now", "files": {}}))
    return site


def test_the_sites_own_imports_and_page_scripts_name_its_version(tmp_path):
    site = _site(tmp_path)
    m = build._version_site(site)
    v = m["version"]
    assert len(v) == 16 and m["pyodide"] == "314.0.8"  # the manifest's own fields are kept
    assert json.loads((site / "manifest.json").read_text())["version"] == v
    app = (site / "app.mjs").read_text().splitlines()
    assert app[0] == f'import {{ a }} from "./a.mjs?v={v}";'
    assert app[1] == f"import * as b from '../b.mjs?v={v}';"
    assert app[2] == f'export {{ c }} from "./page/c.mjs?v={v}";'
    assert app[3] == f'import "./side.mjs?v={v}";'
    assert app[4] == f'const p = import("./lazy.mjs?v={v}");'
    assert app[5:] == APP.splitlines()[5:]  # other origins, URLs made at run time, other strings
    assert (site / "page" / "c.mjs").read_text() == f'import {{ v }} from "../versioned.mjs?v={v}";\n'
    assert (site / "pyscript" / "core.mjs").read_text() == 'import "./x.mjs";\n'
    page = (site / "index.html").read_text()
    assert f'href="app.css?v={v}"' in page and f'src="disk-loader.js?v={v}"' in page
    pyodide = m["pyodide_files"]
    assert "tgweb.snapshot" not in pyodide["files"] and "micropip-1-py3-none-any.whl" in pyodide["files"]
    assert pyodide["version"] != v
    assert f"const PYODIDE = {json.dumps(pyodide)};" in (site / "versioned.mjs").read_text()


def test_a_changed_file_changes_its_version_and_pyodide_keeps_its_own(tmp_path):
    def versions(edit):
        site = _site(tmp_path / edit.__name__)
        edit(site)
        m = build._version_site(site)
        return m["version"], m["pyodide_files"]["version"]

    def nothing(site):
        pass

    def built_later(site):
        (site / "manifest.json").write_text(json.dumps({"pyodide": "314.0.8", "built": "later", "files": {}}))

    def snapshot(site):
        (site / "pyodide" / "tgweb.snapshot").write_text("another snapshot")

    def wasm(site):
        (site / "pyodide" / "pyodide.asm.wasm").write_text("another Pyodide")

    site, pyodide = versions(nothing)
    assert versions(built_later) == (site, pyodide)  # the same files: the same versions
    new_snapshot = versions(snapshot)
    assert new_snapshot[0] != site and new_snapshot[1] == pyodide
    assert versions(wasm)[1] != pyodide


@pytest.mark.parametrize(
    "file, text", [("index.html", "<p>no scripts</p>"), ("versioned.mjs", "export {};\n")]
)
def test_a_site_whose_marks_are_gone_is_refused(tmp_path, file, text):
    site = _site(tmp_path)
    (site / file).write_text(text)
    with pytest.raises(SystemExit, match="no longer has"):
        build._version_site(site)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    site = _site(tmp_path_factory.mktemp("served"))
    m = build._version_site(site)
    with serving(site) as port:
        yield site, port, m


def _cache_control(port, path):
    status, headers, _ = http_get(port, path)
    return status, headers["cache-control"]


def test_a_file_asked_for_at_its_version_may_be_kept_for_good(served):
    _, port, m = served
    v, pv = m["version"], m["pyodide_files"]["version"]
    assert _cache_control(port, f"/app.mjs?v={v}") == (200, build.IMMUTABLE)
    assert _cache_control(port, f"/page/c.mjs?reader=&v={v}") == (200, build.IMMUTABLE)
    assert _cache_control(port, f"/pyodide/tgweb.snapshot?v={v}") == (200, build.IMMUTABLE)
    assert _cache_control(port, f"/pyodide/pyodide.asm.wasm?v={pv}") == (200, build.IMMUTABLE)
    # the page, another version, Pyodide's file at the site's version and the site's at
    # Pyodide's, a version given twice, a file that is not there: asked again every time
    for path in ["/", "/index.html", "/app.mjs", f"/app.mjs?v={pv}", "/app.mjs?v=0123456789abcdef",
                 f"/pyodide/pyodide.asm.wasm?v={v}", f"/pyodide/tgweb.snapshot?v={pv}",
                 f"/app.mjs?v={v}&v={v}"]:  # fmt: skip
        assert _cache_control(port, path) == (200, "no-cache"), path
    assert _cache_control(port, f"/missing.mjs?v={v}") == (404, "no-cache")


def test_a_site_without_versions_is_never_kept(tmp_path):
    site = _site(tmp_path)  # not versioned: its manifest names none
    with serving(site) as port:
        for path in ["/app.mjs?v=", "/app.mjs?v=None", "/pyodide/pyodide.mjs?v=null"]:
            assert _cache_control(port, path) == (200, "no-cache"), path
