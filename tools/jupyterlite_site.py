"""The JupyterLite site, site/lite/ (`python3 build.py lite`): examples/notebooks/ in
JupyterLite with its Pyodide kernel, all of it from the served site, nothing from a CDN
or PyPI when it runs.

- jupyterlite-core and jupyterlite-pyodide-kernel build it: pinned in build.py's
  PIP_PACKAGES, so `build.py setup` installs them into the project's .venv.
- The kernel runs the site's Pyodide (site/pyodide/, pyodideUrl) and installs its own
  Python packages (ipython, jedi, comm and theirs: pure wheels from PyPI, pinned by
  sha256 below) and tgweb (`%pip install tgweb`: the site's wheel) from the lite site's
  piplite index; PyPI is never asked (disablePyPIFallback).

site/ must be bundled first (build.bundle_site), and this again after each bundle.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from build import PY, _sha256, run  # noqa: E402  (build.py, at the repository's root)

WHEELS = ROOT / "build" / "cache" / "lite-wheels"
# what the Pyodide kernel installs for itself (its ipykernel shim, piplite and pyodide_kernel
# come in its own wheel): ipython 9.12.0 and jedi 0.19.2 are the versions of Pyodide 314's lock
KERNEL_WHEELS = {
    "asttokens-3.0.2-py3-none-any.whl": "9da13157f5b28becde0bd374fc677dcd3c290614264eff096f167c469cd9f933",
    "comm-0.2.3-py3-none-any.whl": "c615d91d75f7f04f095b30d1c1711babd43bdc6419c1be9886a85f2f4e489417",
    "decorator-5.3.1-py3-none-any.whl": "f47fe6fdbd2edd623ecfe36875d37aba411624e2670dd395dddae1358689bb3c",
    "executing-2.3.0-py3-none-any.whl": "736e859c9f8701f11fcf516856f26f562e04776387824b43a35a1dfe21c84122",
    "ipython-9.12.0-py3-none-any.whl": "0f2701e8ee86e117e37f50563205d36feaa259d2e08d4a6bc6b6d74b18ce128d",
    "ipython_pygments_lexers-1.1.1-py3-none-any.whl": "a9462224a505ade19a605f71f8fa63c2048833ce50abc86768a0d81d876dc81c",  # noqa: E501
    "jedi-0.19.2-py2.py3-none-any.whl": "a8ef22bde8490f57fe5c7681a3c83cb58874daf72b4784de3cce5b6ef6edb5b9",
    "matplotlib_inline-0.2.2-py3-none-any.whl": "3c821cf1c209f59fb2d2d64abbf5b23b67bcb2210d663f9918dd851c6da1fcf6",  # noqa: E501
    "parso-0.8.7-py2.py3-none-any.whl": "a8926eb2a1b915486941fdbd31e86a4baf88fe8c210f25f2f35ecec5b574ca1c",
    "pexpect-4.9.0-py2.py3-none-any.whl": "7236d1e080e4936be2dc3e326cec0af72acf9212a7e1d060210e70a47e253523",
    "prompt_toolkit-3.0.53-py3-none-any.whl": "01c0891d7f9237d5e339f7d3e42cdae80b7534abb1c7c0e3352efba6231492f2",  # noqa: E501
    "ptyprocess-0.7.0-py2.py3-none-any.whl": "4b41f3967fce3af57cc7e94b888626c18bf37a083e3651ca8feeb66d492fef35",  # noqa: E501
    "pure_eval-0.2.4-py3-none-any.whl": "96cae060a313cfaad51bb761278bfb0e62dc0248d9315a81173752dc546cd37a",
    "pygments-2.21.0-py3-none-any.whl": "2363c69b61c4a97c838da3b130dcd6468f4848992b21a82f2a63ec34377137d9",
    "stack_data-0.6.3-py3-none-any.whl": "d5558e0c25a4cb0853cddad3d77da9891a08cb85dd9f9f91b9f8cd66e511e695",
    "traitlets-5.16.1-py3-none-any.whl": "f775618166caa0396c8e337099240f2bd3e5e917d203b2e6fbe21a58d3cb1f6b",
    "wcwidth-0.9.4-py3-none-any.whl": "901eace6d2dd25ebb917d0ce5db18e5c537e1504c905cf32f0d006c12098b05d",
}
KERNEL = "@jupyterlite/pyodide-kernel-extension:kernel"


def _jupyter_lite() -> Path:
    """The project's .venv's `jupyter-lite` (build.py setup installs it there): `build.py
    lite` itself runs under whichever python3 started it."""
    exe = PY.parent / "jupyter-lite"
    if not exe.exists():
        sys.exit(f"no {exe}: `python3 build.py setup` installs jupyterlite-core")
    return exe


def _kernel_wheels() -> list[Path]:
    """KERNEL_WHEELS in build/cache/lite-wheels/, downloaded once and checked by sha256."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    out = []
    for name, sha in KERNEL_WHEELS.items():
        path = WHEELS / name
        if not path.exists():
            dist, version = name.split("-")[:2]
            run([PY, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                  "--python-version", "3.14", "--platform", "any", "--implementation", "py", "--abi", "none",
                  "-d", WHEELS, f"{dist}=={version}"])  # fmt: skip
        if _sha256(path) != sha:
            path.unlink()
            sys.exit(f"{name}: its sha256 is not the pinned one (tools/jupyterlite_site.py); removed it")
        out.append(path)
    return out


def bundle(site: Path) -> Path:
    """Build site/lite/ from examples/notebooks/ (see the module's docstring)."""
    wheels = sorted((site / "wheels").glob("tgweb-*.whl"))
    if not (site / "pyodide" / "pyodide.mjs").exists() or len(wheels) != 1:
        sys.exit(f"{site} has no Pyodide or no single tgweb wheel: bundle the site first (build.bundle_site)")
    jupyter_lite = _jupyter_lite()
    lite_dir = ROOT / "build" / "lite-src"  # empty: no stray jupyter-lite.json is picked up
    tmp = ROOT / "build" / "lite.tmp"
    shutil.rmtree(lite_dir, ignore_errors=True)
    shutil.rmtree(tmp, ignore_errors=True)
    lite_dir.mkdir(parents=True)
    cmd = [jupyter_lite, "build", "--lite-dir", lite_dir, "--output-dir", tmp,
           "--contents", ROOT / "examples" / "notebooks"]  # fmt: skip
    for whl in [*_kernel_wheels(), wheels[0]]:
        cmd += ["--piplite-wheels", whl]
    run(cmd, cwd=lite_dir)
    # the kernel's Pyodide is the site's (lite/lab/ and lite/notebooks/ are two levels down)
    config = tmp / "jupyter-lite.json"
    data = json.loads(config.read_text())
    settings = data["jupyter-config-data"].setdefault("litePluginSettings", {}).setdefault(KERNEL, {})
    settings.update(pyodideUrl="../../pyodide/pyodide.mjs", disablePyPIFallback=True)
    config.write_text(json.dumps(data, indent=2))
    shutil.rmtree(site / "lite", ignore_errors=True)
    tmp.rename(site / "lite")
    return site / "lite"
