"""Export, graph optimisation and the ONNX target on real onnxruntime runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from edgesmith.convert import compat, export, optimize
from edgesmith.errors import ConversionError, UnsupportedOpError
from edgesmith.pipeline import data, registry
from edgesmith.profiles.schema import TargetSpec


class WithDropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(4 * 64, 10)

    def forward(self, x):
        x = self.drop(torch.relu(self.bn(self.conv(x))))
        return self.fc(x.flatten(1) * 1.0 + 0.0)


@pytest.fixture(scope="module")
def splits():
    return data.digits(0)


def test_export_is_opset_17_with_dynamic_batch(tmp_path):
    path = export.export_onnx(WithDropout(), (1, 1, 8, 8), tmp_path / "m.onnx")
    m = onnx.load(str(path))
    assert m.opset_import[0].version == 17
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"


def test_optimize_folds_bn_drops_dropout_and_keeps_numerics(tmp_path, splits):
    model = WithDropout()
    with torch.no_grad():  # non-trivial BN statistics, so folding changes the weights
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    raw = tmp_path / "raw.onnx"
    torch.onnx.export(model.eval(), (torch.zeros(1, 1, 8, 8),), str(raw), dynamo=False,
                      opset_version=17, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.PRESERVE,
                      input_names=["input"], dynamic_axes={"input": {0: "batch"}})
    before = optimize.op_histogram(onnx.load(str(raw)))
    res = optimize.optimize(raw, tmp_path / "opt.onnx", splits.val_x)
    assert "BatchNormalization" not in res.ops_after
    assert "Dropout" not in res.ops_after and "Identity" not in res.ops_after
    assert res.nodes_after < sum(before.values())
    assert res.max_abs_err <= res.tolerance == optimize.parity_tolerance(res.output_scale)


def test_op_without_onnx_export_is_a_conversion_error_naming_it(tmp_path, capfd):
    class LogGamma(nn.Module):
        def forward(self, x):
            return torch.lgamma(x)

    with pytest.raises(ConversionError, match="aten::lgamma"):
        export.export_onnx(LogGamma(), (1, 1, 8, 8), tmp_path / "m.onnx")
    assert "Torch IR graph" not in capfd.readouterr().out


def _custom_op_model(path):
    from onnx import TensorProto, helper

    node = helper.make_node("Frobnicate", ["input"], ["output"], name="my_custom",
                            domain="com.example")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    onnx.save(model, str(path))
    return path


def _targets(*specs):
    return [(spec, registry.get(spec.format.value)) for spec in specs]


def test_compat_names_node_and_target_for_an_unsupported_op(tmp_path):
    report = compat.check(_custom_op_model(tmp_path / "c.onnx"),
                          _targets(TargetSpec(format="onnx", precision="fp32")))
    assert report.rows[0].status["onnx-fp32"] == "unsupported"
    with pytest.raises(UnsupportedOpError) as err:
        report.raise_for_unsupported()
    assert "my_custom (Frobnicate) -> onnx-fp32" in err.value.message()
    assert err.value.exit_code == 4


def test_compat_report_on_digits_all_supported_for_onnx(tmp_path, splits):
    import sys

    from tests.conftest import ROOT

    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    from model import build

    sys.path.pop(0)
    raw = export.export_onnx(build(), (1, 1, 8, 8), tmp_path / "d.onnx")
    report = compat.check(raw, _targets(TargetSpec(format="onnx", precision="int8")))
    assert report.counts()["onnx-int8"]["unsupported"] == 0
    conv = next(r for r in report.rows if r.op_type == "Conv")
    assert "kernel_shape" in conv.attrs


def test_inspect_cli_prints_table_and_json(cli):
    from tests.conftest import DIGITS_ARCH

    r = cli("inspect", DIGITS_ARCH, "-p", "jetson-orin-nano", "--json")
    assert r.code == 0, r.err
    import json

    doc = json.loads(r.out)
    assert doc["targets"] == ["onnx-fp16", "tflite-fp32"]
    assert {row["op_type"] for row in doc["rows"]} >= {"Conv", "Add", "Gemm"}
    r = cli("inspect", DIGITS_ARCH, "-p", "jetson-orin-nano", "--all")
    assert r.code == 0 and "Conv" in r.out


def test_onnx_fp16_and_int8_run_in_onnxruntime(tmp_path, splits):
    from edgesmith.compress.calibration import CalibrationSet
    from edgesmith.convert import onnx_qdq

    raw = export.export_onnx(WithDropout(), (1, 1, 8, 8), tmp_path / "m.onnx")
    fp16 = onnx_qdq.to_fp16(raw, tmp_path / "fp16.onnx")
    int8 = onnx_qdq.quantize_qdq(raw, CalibrationSet(x=splits.calib_x), tmp_path / "q.onnx")
    ref = optimize.run_ort(raw, splits.val_x)
    for path in (fp16, int8):
        out = optimize.run_ort(path, splits.val_x)
        assert out.shape == ref.shape
        cos = (out * ref).sum(1) / (np.linalg.norm(out, axis=1) * np.linalg.norm(ref, axis=1))
        assert cos.mean() > 0.99
    ops = {n.op_type for n in onnx.load(str(int8)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
