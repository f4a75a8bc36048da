"""setuptools' hook for tgweb's wheel (the metadata is in pyproject.toml).

tgweb.export_page writes the shim (web/device.mjs and web/gpu.mjs) into the pages it
exports, and tgweb.jsbridge loads it (and web/bulk.mjs) in any Pyodide, so the wheel
carries copies as tgweb/_device.mjs, tgweb/_gpu.mjs and tgweb/_bulk.mjs, made here at build
time: web/ stays the only source, and `pip install .` from a clone gets them as build.py's
wheel does (MANIFEST.in puts them in an sdist too).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

WEB = Path(__file__).resolve().parent / "web"
SHIM = ("device.mjs", "gpu.mjs")  # tgweb/export.py's SHIM
# what tgweb.jsbridge loads besides the shim in a Pyodide that tgweb's worker did not start
BRIDGE = ("bulk.mjs",)


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        for name in SHIM + BRIDGE:
            if not (WEB / name).exists():
                raise SystemExit(f"tgweb's wheel needs {WEB / name}, which is missing")
            dst = Path(self.build_lib) / "tgweb" / ("_" + name)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(WEB / name, dst)


setup(cmdclass={"build_py": BuildPy})
