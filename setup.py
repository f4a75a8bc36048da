"""setuptools' hook for tgweb's wheel (the metadata is in pyproject.toml).

tgweb.export_page writes web/gpu.mjs into the pages it exports, so the wheel carries a
copy as tgweb/_gpu.mjs, made here at build time: web/ stays the only source, and
`pip install .` from a clone gets it as build.py's wheel does (MANIFEST.in puts
web/gpu.mjs in an sdist too).
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

GPU_MJS = Path(__file__).resolve().parent / "web" / "gpu.mjs"


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if not GPU_MJS.exists():
            raise SystemExit(f"tgweb's wheel needs {GPU_MJS}, which is missing")
        dst = Path(self.build_lib) / "tgweb" / "_gpu.mjs"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(GPU_MJS, dst)


setup(cmdclass={"build_py": BuildPy})
