"""Fixtures for compress/: the digits splits, a trained demo CNN, profiles built in code."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

import edgesmith.cli.compress  # noqa: F401  (registers `edgesmith compress` on the app)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def splits():
    from edgesmith.pipeline.data import digits

    return digits(0)


@pytest.fixture(scope="session")
def _trained(digits_ckpt):
    from edgesmith.pipeline.model import load

    return load(str(digits_ckpt), arch=f"{ROOT}/examples/digits/model.py:build").torch_model


@pytest.fixture
def trained(_trained) -> torch.nn.Module:
    """A fresh copy of the trained demo CNN (tests may prune it in place)."""
    return copy.deepcopy(_trained).eval()


def make_profile(compress: dict | None = None, budget: float | None = 1.0) -> dict:
    return {
        "name": "test", "device": {"name": "t", "arch": "x86_64", "ram_mb": 1000},
        "targets": [{"format": "onnx"}],
        "compress": compress or {},
        "budgets": {"accuracy_drop": budget} if budget is not None else {},
    }


@pytest.fixture
def profile_file(tmp_path):
    def write(compress: dict | None = None, budget: float | None = 1.0) -> Path:
        path = tmp_path / "profile.yaml"
        path.write_text(yaml.safe_dump(make_profile(compress, budget)))
        return path

    return write


@pytest.fixture
def profile():
    from edgesmith.profiles.schema import Profile

    def build(compress: dict | None = None, budget: float | None = 1.0) -> Profile:
        return Profile.model_validate(make_profile(compress, budget))

    return build


@pytest.fixture(autouse=True)
def _one_thread():
    """The digits CNN is tiny: one intra-op thread is faster than two, and much faster
    when the 2-core machine is busy (OpenMP workers spin for a core that isn't free)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
