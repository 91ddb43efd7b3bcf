"""pip install . (project metadata in pyproject.toml). The wheel carries the extension's sources,
so that `rmsnorm` builds its kernels from an installed copy: kernels/, binding/ and sources.txt go
into rmsnorm/_sources, and the cases this project keeps (regressions/) into harness/regressions."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SOURCES = ("kernels", "binding", "sources.txt")


class BuildWithSources(build_py):
    def run(self):
        super().run()
        into = Path(self.build_lib)
        dest = into / "rmsnorm" / "_sources"
        for name in SOURCES:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, dest / name, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.o", "*.so"))
            else:
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)
        shutil.copytree(ROOT / "regressions", into / "harness" / "regressions", dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithSources})
