"""ONNX files with a literal batch of 1 (how most published models come) convert and
validate: the batch axis is made symbolic where a batch-2 run proves the graph allows it,
else every run feeds one sample."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import DIGITS_ARCH


def _trained(ckpt: Path):
    from edgesmith.pipeline.model import load

    return load(str(ckpt), arch=DIGITS_ARCH).torch_model


def _export_static(module: torch.nn.Module, path: Path) -> Path:
    """torch.onnx.export without dynamic axes: every shape, the batch too, is literal."""
    torch.onnx.export(module, torch.zeros(1, 1, 8, 8), str(path), dynamo=False,
                      opset_version=17, input_names=["input"], output_names=["logits"])
    return path


class ReshapesToOne(torch.nn.Module):
    """The digits CNN with its flatten written as ``reshape(1, -1)``: the exported graph
    holds the constant 1, so a symbolic input axis alone breaks it at batch 2."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.net
        x = m.stem(x)
        x = torch.relu(x + m.pw(m.dw(m.block1(x))))
        x = m.pool(m.block2(m.down(x))).reshape(1, -1)
        return m.classifier(x)


@pytest.fixture(scope="module")
def models(digits_ckpt, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fixed")
    net = _trained(digits_ckpt)
    return {"flatten": _export_static(net, tmp / "fixed_flatten.onnx"),
            "reshape": _export_static(ReshapesToOne(net).eval(), tmp / "fixed_reshape.onnx")}


def _batch_dim(path: Path):
    import onnx

    d = onnx.load(str(path)).graph.input[0].type.tensor_type.shape.dim[0]
    return d.dim_value if d.HasField("dim_value") else d.dim_param


def test_static_export_fixes_the_batch_to_one(models):
    assert _batch_dim(models["flatten"]) == 1 and _batch_dim(models["reshape"]) == 1


def test_fixed_batch_model_whose_graph_allows_it_gets_a_symbolic_batch(cli, models, tmp_path):
    out = tmp_path / "o"
    r = cli("convert", models["flatten"], "--out", out, "-t", "onnx:fp32", "-t", "onnx:int8")
    assert r.code == 0, r.err
    assert "batch axis was made symbolic" in r.err
    m = json.loads((out / "manifest.json").read_text())
    assert m["stages"]["export"]["batch"]["mode"] == "made-dynamic"
    assert [t["status"] for t in m["targets"]] == ["ok", "ok"]
    assert m["reference"]["accuracy"] > 0.95
    # the published model takes any batch
    from edgesmith.convert.optimize import run_ort

    assert isinstance(_batch_dim(out / "model.onnx"), str)
    x = np.load(out / "data" / "bench_input.npy")
    assert run_ort(out / "model.onnx", x, batch=16).shape == (16, 10)


def test_fixed_batch_model_that_reshapes_to_one_runs_one_sample_at_a_time(cli, models,
                                                                          tmp_path):
    out = tmp_path / "o"
    r = cli("convert", models["reshape"], "--out", out, "-t", "onnx:fp32", "-t", "onnx:int8",
            "-t", "openvino:int8")
    assert r.code == 0, r.err
    assert "every run feeds one sample" in r.err and "batch 2 fails" in r.err
    m = json.loads((out / "manifest.json").read_text())
    batch = m["stages"]["export"]["batch"]
    assert batch["mode"] == "per-sample" and "Gemm" in batch["detail"]
    assert [t["status"] for t in m["targets"]] == ["ok", "ok", "ok"]
    assert m["reference"]["accuracy"] > 0.95
    for t in m["targets"]:
        assert t["accuracy_drop"] <= 1.0 and t["parity"]["cosine"] > 0.99
    assert _batch_dim(out / "model.onnx") == 1  # left as the user gave it


def test_batch_check_decides_not_the_input_declaration(models):
    """Making the input symbolic is not enough: the reshape model's symbolic copy is
    refused by the batch-2 run, the flatten model's accepted."""
    from edgesmith.pipeline.data import digits
    from edgesmith.pipeline.model import fit_batch, load

    x = digits().val_x[:2]
    ok = fit_batch(load(str(models["flatten"])), x)
    refused = fit_batch(load(str(models["reshape"])), x)
    assert ok.batch.mode == "made-dynamic" and ok.onnx_bytes is not None
    assert ok.batch.max_batch is None
    assert refused.batch.mode == "per-sample" and refused.onnx_bytes is None
    assert refused.batch.max_batch == 1


def test_dynamic_batch_model_is_left_as_it_is(cli, models, tmp_path):
    from edgesmith.pipeline.data import digits
    from edgesmith.pipeline.model import fit_batch, load

    cli("convert", models["flatten"], "--out", tmp_path / "o", "-t", "onnx:fp32")
    loaded = fit_batch(load(str(tmp_path / "o" / "model.onnx")), digits().val_x[:2])
    assert loaded.batch.mode == "dynamic" and loaded.onnx_bytes is None
