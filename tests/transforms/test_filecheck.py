"""Runs the FileCheck tests in tests/filecheck through lit."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1] / "filecheck"


def test_lit_filecheck_suite() -> None:
    for tool in ("opc", "filecheck", "lit"):
        if shutil.which(tool) is None:
            pytest.fail(f"`{tool}` is not on PATH: install with `pip install .[test]`")
    proc = subprocess.run(
        [shutil.which("lit"), "-v", "-j", str(os.cpu_count() or 2), str(HERE)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Passed" in proc.stdout
