"""tests/support/requires.py: a missing optional package skips, a broken one fails."""

from __future__ import annotations

import sys

import pytest
from requires import import_or_skip


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """Two installed-but-broken packages: one whose shared library does not load, one that
    imports a dependency that is not installed."""
    (tmp_path / "opc_broken_so").mkdir()
    (tmp_path / "opc_broken_so" / "__init__.py").write_text(
        "raise ImportError('libopc_nowhere.so: cannot open shared object file')\n")
    (tmp_path / "opc_broken_dep").mkdir()
    (tmp_path / "opc_broken_dep" / "__init__.py").write_text("import opc_dependency_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("opc_broken_so", "opc_broken_dep"):
        sys.modules.pop(name, None)


def test_absent_package_skips() -> None:
    with pytest.raises(pytest.skip.Exception, match="opc_no_such_package is not installed: the reason"):
        import_or_skip("opc_no_such_package", "the reason")


@pytest.mark.usefixtures("packages")
@pytest.mark.parametrize("name,error", [("opc_broken_so", "libopc_nowhere.so"),
                                        ("opc_broken_dep", "opc_dependency_not_installed")])
def test_broken_package_fails(name: str, error: str) -> None:
    with pytest.raises(ImportError, match=error):
        import_or_skip(name, "the reason")


def test_installed_package_imports() -> None:
    assert import_or_skip("json", "never skipped").dumps([1]) == "[1]"
