"""Cortex-M depthwise convolutions keep int8 weights int8 in flash, in ONNX's order, and
their kernel, es_dwconv2d_i8_mcu, gives the reference kernels' outputs bit for bit: its
plain C path on the host and its DSP path (SMLAD on tap pairs) on an emulated Cortex-M7
(QEMU's mps2-an500), on odd depthwise geometries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_tools
from tests.targets._helpers import _qdq, export
from tests.targets.test_mcu_kernels import M7_CC, M7_FLAGS, generate_for


@pytest.fixture(autouse=True)
def _tools() -> None:
    """The Makefile installs these: missing is a broken setup, a failure, not a skip."""
    require_tools("qemu-system-arm", M7_CC)


def dw_geometry_net():
    """Depthwise convs in the shapes that end the kernel's tap pairs early or leave the
    DSP path: 7 channels, 3x3 stride 1 and 2 with asymmetric padding, 5x5, dilation 2 (the
    plain path), an even 2x4 kernel (pairs only) and a 1x3 one (one lone tap a row)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def dw(k, s=1, p=0, d=1):
        return nn.Conv2d(7, 7, k, s, p, dilation=d, groups=7)

    return nn.Sequential(
        nn.Conv2d(3, 7, 1), dw(3, 1, 1), nn.ReLU6(), dw(3, 2, (0, 1)), nn.ReLU(),
        dw(5, 1, 2), dw(3, 1, 2, 2), nn.ReLU(), dw((2, 4), 1, (1, 2)), dw((1, 3), 1, (0, 1)),
        nn.Flatten(), nn.LazyLinear(10)).eval()


@pytest.fixture(scope="module")
def dw_qdq(tmp_path_factory) -> tuple[Path, np.ndarray]:
    import torch

    work = tmp_path_factory.mktemp("mcu_dw")
    x = np.random.default_rng(4).standard_normal((16, 3, 13, 11)).astype(np.float32)
    net = dw_geometry_net()
    net(torch.from_numpy(x[:1]))  # sizes the lazy Linear
    fp32 = export(net, torch.from_numpy(x[:1]), work / "dw.onnx")
    return _qdq(fp32, x, work / "dw_qdq.onnx"), x


def test_cortex_m_depthwise_keeps_int8_weights_in_onnx_order(dw_qdq):
    """Every depthwise conv of a Cortex-M7 build is es_dwconv2d_i8_mcu with its weights
    [C][KH*KW] int8, byte for byte the quantized ONNX weights (no padding to 16 channels);
    the host keeps its own depthwise kernel."""
    from edgesmith.targets import isa
    from edgesmith.targets.ir import lower

    qdq, _ = dw_qdq
    g = lower(qdq, "int8", isa.macros(M7_CC, M7_FLAGS))
    dws = [c for st in g.steps for c in st.calls if c.fn == "es_dwconv2d_i8_mcu"]
    assert len(dws) == 6
    shapes = [g.tensors[c.args[1].name].shape for c in dws]
    assert shapes == [(7, 9), (7, 9), (7, 25), (7, 9), (7, 8), (7, 3)]
    assert all(g.tensors[c.args[1].name].ctype == "int8_t" for c in dws)
    host = lower(qdq, "int8", frozenset({"__x86_64__"}))
    assert not any(c.fn == "es_dwconv2d_i8_mcu" for st in host.steps for c in st.calls)


def test_mcu_depthwise_plain_c_matches_reference_kernels_bit_for_bit(dw_qdq, tmp_path):
    from edgesmith.targets import run

    qdq, x = dw_qdq
    mcu = generate_for(qdq, tmp_path / "mcu")
    ref = generate_for(qdq, tmp_path / "ref", kernels="reference", cc=None)
    assert "es_dwconv2d_i8_mcu" in (mcu / "model.c").read_text()
    np.testing.assert_array_equal(run.run(mcu, x), run.run(ref, x))


def test_mcu_depthwise_on_emulated_cortex_m7_equals_reference_kernels(dw_qdq, tmp_path):
    """The DSP path (SMLAD on tap pairs, unaligned pair reads) under QEMU's mps2-an500."""
    from edgesmith.targets import mcu_qemu, run

    qdq, x = dw_qdq
    ref = generate_for(qdq, tmp_path / "ref", kernels="reference", cc=None)
    m7 = generate_for(qdq, tmp_path / "m7")
    assert "es_dwconv2d_i8_mcu" in (m7 / "model.c").read_text()
    np.testing.assert_array_equal(mcu_qemu.run(m7, x[:4]), run.run(ref, x[:4]))
