"""Ship the top-level runtime/ headers inside the package as opc/_runtime, and the small
examples (examples/*.mlir, *.toml) as opc/_examples.

SPEC.md keeps runtime/ and examples/ at the top of the tree; a plain `pip install .` must
still find them (opc's build needs the headers; `opc example` hands out the examples, so
the quick start works without a checkout), so the build copies them next to the Python code.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# (folder at the top of the tree, folder inside the package, the files it ships)
SHIPPED = [
    ("runtime", "_runtime", ("*.h", "*.cuh", "*.c", "*.cu")),
    ("examples", "_examples", ("*.mlir", "*.toml")),
]


class BuildWithRuntime(build_py):
    def run(self) -> None:
        super().run()
        for top, inside, patterns in SHIPPED:
            src = Path(__file__).parent / top
            dst = Path(self.build_lib) / "opc" / inside
            dst.mkdir(parents=True, exist_ok=True)
            for file in [f for pattern in patterns for f in src.glob(pattern)]:
                shutil.copy2(file, dst / file.name)


setup(cmdclass={"build_py": BuildWithRuntime})
