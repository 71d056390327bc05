"""Each op-compat rule of TFLite / OpenVINO / Core ML, checked against the real converter.

Per rule: a tiny model that exports to that ONNX op; the target's ``compat`` must give the
ruled status for the node, and the converter must agree: "unsupported" means the
conversion fails, the result cannot run, or it computes something else; "supported" and
"lowered" mean it converts and (where this host can run it) matches onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from edgesmith.convert.compat import _attrs
from edgesmith.convert.coreml import CoreMLTarget
from edgesmith.convert.openvino import OpenVINOTarget
from edgesmith.convert.tflite import TFLiteTarget
from edgesmith.errors import ConversionError
from tests.convert._formats import custom_op_onnx, export, make_ctx, onnx_run

TARGETS = {"tflite": TFLiteTarget, "openvino": OpenVINOTarget, "coreml": CoreMLTarget}
SHAPE = (3, 8, 8)

# op name -> function applied after a 1x1 conv (so every model has weights to convert)
OPS = {
    "Erf": torch.erf,
    "Erf/gelu": nn.GELU(),  # Div -> Erf -> Add -> Mul -> Mul: onnx2tf makes it one GELU
    "Einsum": lambda x: torch.einsum("bchw,bcHw->bhH", x, x),
    "CumSum": lambda x: torch.cumsum(x, dim=2),
    "GridSample": lambda x: F.grid_sample(x, torch.tanh(x[:, :2].permute(0, 2, 3, 1)),
                                          align_corners=False),
    "Det": lambda x: torch.linalg.det(x[:, :, :4, :4]),
    "InstanceNormalization": nn.InstanceNorm2d(3),
    "Resize/cubic": lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"),
    "Mod/fmod": lambda x: torch.fmod(x, 0.7),
    "Trilu": torch.triu,
}
# (target, op) -> ruled status: every rule in the three modules, plus controls
CASES = [
    ("tflite", "Erf", "lowered"),
    ("tflite", "Erf/gelu", "lowered"),
    ("tflite", "Einsum", "unsupported"),
    ("tflite", "CumSum", "unsupported"),
    ("tflite", "GridSample", "unsupported"),
    ("tflite", "Det", "unsupported"),
    ("tflite", "InstanceNormalization", "lowered"),
    ("tflite", "Resize/cubic", "unsupported"),
    ("tflite", "Mod/fmod", "unsupported"),
    ("tflite", "Trilu", "unsupported"),
    ("openvino", "Trilu", "supported"),
    ("openvino", "Det", "unsupported"),
    ("openvino", "Erf", "supported"),
    ("openvino", "GridSample", "supported"),
    ("coreml", "Det", "unsupported"),
    ("coreml", "Resize/cubic", "unsupported"),
    ("coreml", "Mod/fmod", "unsupported"),
    ("coreml", "Erf", "supported"),
]


class _Tiny(nn.Module):
    def __init__(self, f):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 3, 1)
        self.f = f

    def forward(self, x):
        return self.f(self.conv(x))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compat")
    return {op: export(_Tiny(f).eval(), SHAPE, folder / op.replace("/", "_"))
            for op, f in OPS.items()}


def _ruled(target, onnx_path, op):
    op_type = op.split("/")[0]
    nodes = [n for n in onnx.load(str(onnx_path)).graph.node if n.op_type == op_type]
    assert nodes, f"the tiny model did not export a {op_type} node"
    return {target.compat(n.op_type, _attrs(n), "fp32").status for n in nodes}


def _outcome(fmt, onnx_path, ts, folder):
    """'fails', 'wrong', 'matches' or 'converted' (cannot run here)."""
    cls = TARGETS[fmt]
    x = np.random.default_rng(0).standard_normal((4, *SHAPE)).astype(np.float32)
    ctx = make_ctx(cls, fmt, "fp32", onnx_path, x, folder, torchscript=ts)
    try:
        art = cls().convert(ctx)
        run = cls().runner(art)
        if run is None:
            return "converted"
        y = run(x[:1])
    except (ConversionError, RuntimeError, ValueError):
        return "fails"
    ref = onnx_run(onnx_path, x[:1])
    if y.shape != ref.shape or not np.allclose(y, ref, atol=1e-4):
        return "wrong"
    return "matches"


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "op", "status"), CASES,
                         ids=[f"{f}-{o}-{s}" for f, o, s in CASES])
def test_rule_agrees_with_the_real_converter(models, tmp_path, fmt, op, status):
    onnx_path, ts = models[op]
    assert _ruled(TARGETS[fmt](), onnx_path, op) == {status}
    outcome = _outcome(fmt, onnx_path, ts, tmp_path)
    if status == "unsupported":
        assert outcome in ("fails", "wrong"), outcome
    else:
        assert outcome in ("matches", "converted"), outcome


@pytest.mark.parametrize("fmt", ["tflite", "openvino"])
def test_custom_domain_op_is_unsupported_and_really_fails(tmp_path, fmt):
    path = custom_op_onnx(tmp_path / "custom.onnx")
    node = onnx.load(str(path)).graph.node[0]
    rule = TARGETS[fmt]().rule_for(node.op_type, _attrs(node), "fp32")
    assert rule.status == "unsupported" and "com.example" in rule.hint
    assert _outcome(fmt, path, None, tmp_path) == "fails"


def test_coreml_rules_name_custom_domains_unsupported():
    rule = CoreMLTarget().rule_for("Frobnicate", {"domain": "com.example"}, "int8")
    assert rule.status == "unsupported"


def _one_node_onnx(path, op_type, **attrs):
    """input (N, 3, 8, 8) -> [Unsqueeze ->] op -> output: ops torch does not export."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, src = [], [], "input"
    if op_type == "DFT":
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
        nodes.append(helper.make_node("Unsqueeze", ["input", "axes"], ["u"], name="unsq"))
        src = "u"
    nodes.append(helper.make_node(op_type, [src], ["output"], name="odd", **attrs))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, *SHAPE])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("op_type", "attrs"), [("Hardmax", {"axis": -1}), ("DFT", {"axis": 3})])
def test_tflite_ops_without_a_working_onnx2tf_lowering_are_unsupported(tmp_path, op_type,
                                                                       attrs):
    """Hardmax converts but computes something else; DFT has no onnx2tf module at all (the
    rule for it is generic: any op without ``onnx2tf/ops/<Op>.py``)."""
    path = _one_node_onnx(tmp_path / f"{op_type}.onnx", op_type, **attrs)
    assert _ruled(TFLiteTarget(), path, op_type) == {"unsupported"}
    assert _outcome("tflite", path, None, tmp_path) in ("fails", "wrong")
