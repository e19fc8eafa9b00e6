"""Optional test dependencies: skip only when the package is absent, fail when it is
installed but does not import (a broken install must not pass CI as a skip)."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import pytest


def import_or_skip(name: str, why: str) -> ModuleType:
    """The module `name`; a module-level skip naming `why` only when its top-level package is not
    installed at all. Any other import failure (a missing dependency of the package, a shared
    library that does not load, a version clash) propagates and fails the tests that need it."""
    top = name.partition(".")[0]
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name == top and importlib.util.find_spec(top) is None:
            pytest.skip(f"{top} is not installed: {why}", allow_module_level=True)
        raise
