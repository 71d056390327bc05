"""Shared fixtures: a trained digits checkpoint and an in-process CLI runner."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIGITS_ARCH = f"{ROOT}/examples/digits/model.py:build"


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run `edgesmith ARGS` in this process through the real entry point (exit codes and
    error rendering included), much faster than a subprocess per call."""
    from edgesmith.cli import main

    def run(*args: str) -> CliResult:
        monkeypatch.setattr(sys, "argv", ["edgesmith", *map(str, args)])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture(scope="session")
def digits_ckpt(tmp_path_factory) -> Path:
    """The demo CNN trained briefly (seconds): accurate enough for every validation path."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    try:
        from train import train
    finally:
        sys.path.pop(0)
    model, acc = train(epochs=8)
    assert acc >= 0.95, f"demo model trained to only {acc:.3f}"
    path = tmp_path_factory.mktemp("digits") / "digits.pt"
    torch.save(model.state_dict(), path)
    return path


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests never read or fill the user's ~/.cache/edgesmith."""
    import os

    os.environ["EDGESMITH_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    # nor ~/.cache/edgesmith/zoo/data, where examples/zoo/data.py keeps generated sets
    os.environ["EDGESMITH_ZOO_DATA_CACHE"] = str(tmp_path_factory.mktemp("zoo-data"))
    yield


def require_tools(*tools: str) -> None:
    """Fail, not skip, when a system tool the Makefile installs is missing: a skip would
    let a broken `make setup` pass CI unnoticed."""
    import shutil

    missing = [t for t in tools if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]
    if missing:
        pytest.fail(f"missing {', '.join(missing)}: run `make setup` (it apt-installs them)")
