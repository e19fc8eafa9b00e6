"""Ship the top-level runtime/ headers inside the package as opc/_runtime.

SPEC.md keeps runtime/ at the top of the tree; a plain `pip install .` must
still find it, so the build copies it next to the Python code.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithRuntime(build_py):
    def run(self) -> None:
        super().run()
        src = Path(__file__).parent / "runtime"
        dst = Path(self.build_lib) / "opc" / "_runtime"
        dst.mkdir(parents=True, exist_ok=True)
        for header in [*src.glob("*.h"), *src.glob("*.cuh"), *src.glob("*.c"), *src.glob("*.cu")]:
            shutil.copy2(header, dst / header.name)


setup(cmdclass={"build_py": BuildWithRuntime})
