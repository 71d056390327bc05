"""Shared fixtures for the C runtime tests: exported models and generated, built folders.

Everything is built once per session in a temp dir; the digits model is trained for a
few epochs so INT8 top-1 agreement is measured on a model that actually classifies.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.targets._helpers import _load, _qdq, export, generate


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("c_runtime")


@pytest.fixture(scope="session")
def digits_splits():
    from edgesmith.pipeline.data import digits

    return digits()


@pytest.fixture(scope="session")
def digits_onnx(work, digits_splits) -> Path:
    import torch

    mod = _load("digits", "model")
    model = mod.build()
    s = digits_splits
    x, y = torch.from_numpy(s.train_x), torch.from_numpy(s.train_y).long()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(8):
        perm = torch.randperm(len(x), generator=g)
        for i in range(0, len(x), 64):
            idx = perm[i:i + 64]
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    return export(model, torch.from_numpy(s.val_x[:1]), work / "digits.onnx")


@pytest.fixture(scope="session")
def mnv2():
    return _load("mobilenetv2", "model")


@pytest.fixture(scope="session")
def mnv2_onnx(work, mnv2) -> Path:
    import torch

    return export(mnv2.build(), torch.zeros(1, *mnv2.INPUT_SHAPE), work / "mnv2.onnx")


@pytest.fixture(scope="session")
def digits_qdq(work, digits_onnx, digits_splits) -> Path:
    return _qdq(digits_onnx, digits_splits.calib_x, work / "digits_qdq.onnx")


@pytest.fixture(scope="session")
def mnv2_qdq(work, mnv2_onnx, mnv2) -> Path:
    x, _ = mnv2.sample_data(128, seed=3)
    return _qdq(mnv2_onnx, x, work / "mnv2_qdq.onnx")


@pytest.fixture(scope="session")
def digits_c(work, digits_onnx) -> Path:
    return generate(digits_onnx, work / "digits_c")


@pytest.fixture(scope="session")
def digits_c_int8(work, digits_qdq) -> Path:
    return generate(digits_qdq, work / "digits_c_int8", precision="int8")





