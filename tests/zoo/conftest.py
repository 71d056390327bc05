"""Import the zoo's files (examples/zoo is not a package: users point --arch at the files)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ZOO_DIR = Path(__file__).resolve().parents[2] / "examples" / "zoo"


def zoo_module(name: str):
    """examples/zoo/NAME.py as a module, imported once (siblings importable, as --arch does)."""
    key = f"edgesmith_zoo_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, ZOO_DIR / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ZOO_DIR))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ZOO_DIR))
    sys.modules[key] = module
    return module


@pytest.fixture(scope="session")
def zoo_data():
    return zoo_module("data")
