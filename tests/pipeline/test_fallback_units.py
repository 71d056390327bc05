"""What the fallback keeps in float together, and how few counts its screen tries (issue 15).

A squeeze-and-excitation gate is a Sigmoid whose output one Mul applies to the feature
map. Keeping the Mul alone in float changes nothing: the Sigmoid still quantizes its
output (real onnxruntime quantization below). So the ranking is grouped into units, a
gate with its Mul, and the fallback excludes whole units. The screen bisects the count
of units instead of trying every count (~1 min each on EfficientNet-B0)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from edgesmith.convert.onnx_qdq import quantize_qdq
from edgesmith.inputs import CalibrationSet
from edgesmith.pipeline.fallback import smallest_meeting
from edgesmith.pipeline.sensitivity import fallback_units, rank_layers, ranked_units
from tests.convert._formats import export

SHAPE = (3, 8, 8)


class _SENet(nn.Module):
    """conv -> SE (pool, reduce, ReLU, expand, Sigmoid, Mul) -> pool -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.reduce = nn.Conv2d(8, 2, 1)
        self.expand = nn.Conv2d(2, 8, 1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        gate = torch.sigmoid(self.expand(torch.relu(self.reduce(y.mean((2, 3), keepdim=True)))))
        return self.fc((y * gate).mean((2, 3)))


@pytest.fixture(scope="module")
def se_model(tmp_path_factory):
    torch.manual_seed(0)
    return export(_SENet(), SHAPE, tmp_path_factory.mktemp("se"))[0]


def _calib() -> CalibrationSet:
    x = np.random.default_rng(0).standard_normal((32, *SHAPE)).astype(np.float32)
    return CalibrationSet(x=x, method="minmax", per_channel=True, requested=len(x))


def _nodes(path) -> dict[str, onnx.NodeProto]:
    return {n.name: n for n in onnx.load(str(path)).graph.node}


def _gate_and_mul(path) -> tuple[str, str]:
    nodes = _nodes(path)
    gate = next(n for n in nodes.values() if n.op_type == "Sigmoid")
    mul = next(n for n in nodes.values() if n.op_type == "Mul" and gate.output[0] in n.input)
    return gate.name, mul.name


def _gate_input_of_mul(qdq_path, mul: str) -> str:
    """The op producing the Mul's gate input in the QDQ model (its other input is y)."""
    g = onnx.load(str(qdq_path)).graph
    producer = {o: n for n in g.node for o in n.output}
    node = next(n for n in g.node if n.name == mul)
    ops = [producer[i].op_type for i in node.input if i in producer]
    return "Sigmoid" if "Sigmoid" in ops else "DequantizeLinear"


def test_a_gate_and_the_mul_it_scales_fall_back_as_one_unit(se_model):
    gate, mul = _gate_and_mul(se_model)
    units = fallback_units(se_model)
    assert units[gate] == units[mul] == (gate, mul)
    assert not {n for n in _nodes(se_model) if n not in (gate, mul)} & set(units)


def test_the_mul_alone_in_float_still_reads_a_quantized_gate_and_the_unit_does_not(
        se_model, tmp_path):
    gate, mul = _gate_and_mul(se_model)
    alone = quantize_qdq(se_model, _calib(), tmp_path / "mul.onnx", exclude=[mul])
    unit = quantize_qdq(se_model, _calib(), tmp_path / "unit.onnx", exclude=[gate, mul])
    assert _gate_input_of_mul(alone, mul) == "DequantizeLinear"  # the gate's output rounded
    assert _gate_input_of_mul(unit, mul) == "Sigmoid"  # the float gate feeds the float Mul


def test_the_ranking_is_grouped_into_units_each_node_once(se_model, tmp_path):
    calib = _calib()
    qdq = quantize_qdq(se_model, calib, tmp_path / "qdq.onnx")
    ranking = rank_layers(se_model, qdq, calib.x)
    units = ranked_units(ranking, fallback_units(se_model))
    flat = [n for u in units for n in u]
    assert len(flat) == len(set(flat)) and {s.node for s in ranking} <= set(flat)
    gate, mul = _gate_and_mul(se_model)
    assert (gate, mul) in units and mul in {s.node for s in ranking}


@pytest.mark.parametrize("cap", [1, 2, 7, 48])
def test_the_screen_bisection_finds_the_smallest_count_in_log_tries(cap):
    for lo in (0, 1):
        for need in range(lo, cap + 2):  # cap + 1: no count meets
            asked: list[int] = []

            def meets(k: int, need: int = need, asked: list[int] = asked) -> bool:
                asked.append(k)
                return k >= need

            got = smallest_meeting(lo, cap, meets)
            assert got == (need if need <= cap else None)
            assert len(asked) <= 2 + math.ceil(math.log2(max(cap - lo, 1)))
