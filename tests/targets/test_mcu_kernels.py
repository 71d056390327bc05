"""Cortex-M builds keep int8 weights int8 (flash) and their conv kernel, es_conv2d_i8_mcu,
gives the reference kernels' outputs bit for bit: here its plain C path on the host, in
test_mcu_qemu.py its DSP path (SXTB16 + SMLAD) on an emulated Cortex-M7."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_tools
from tests.targets._helpers import _qdq, export

M7_CC = "arm-none-eabi-gcc"
M7_FLAGS = "-O2 -mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-d16"

# the Makefile installs arm-none-eabi-gcc: missing is a broken setup, a failure, not a skip
needs_arm_gcc = pytest.mark.usefixtures("_arm_gcc")


@pytest.fixture()
def _arm_gcc() -> None:
    require_tools(M7_CC)


def geometry_net():
    """One-group convs in the shapes that end the kernel's 2x2 blocks early or pad its
    quads: odd channel counts (a lone last channel), an odd plane (a lone last pixel),
    C*KH*KW not a multiple of 4, stride 2, dilation 2, asymmetric padding, 1x1, 5x5."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 7, 3, padding=1), nn.ReLU(),             # K = 27, M = 7, plane 11x9
        nn.Conv2d(7, 6, 3, stride=2, padding=(0, 1)), nn.ReLU(),
        nn.Conv2d(6, 5, 3, padding=2, dilation=2), nn.ReLU(),
        nn.Conv2d(5, 9, 1),                                    # K = 5
        nn.Conv2d(9, 4, 5, padding=2), nn.ReLU(),
        nn.Flatten(), nn.Linear(4 * 5 * 5, 10)).eval()


@pytest.fixture(scope="module")
def geometry_qdq(tmp_path_factory) -> tuple[Path, np.ndarray]:
    import torch

    work = tmp_path_factory.mktemp("mcu_geom")
    x = np.random.default_rng(1).standard_normal((16, 3, 11, 9)).astype(np.float32)
    fp32 = export(geometry_net(), torch.from_numpy(x[:1]), work / "geom.onnx")
    return _qdq(fp32, x, work / "geom_qdq.onnx"), x


def generate_for(qdq: Path, out: Path, *, kernels: str = "fast", cc: str | None = M7_CC,
                 cflags: str = M7_FLAGS) -> Path:
    """The C folder of ``qdq`` with kernels picked for ``cc cflags`` (the reference kernels
    when ``kernels`` says so), weights embedded as on an MCU, built with the host cc."""
    from edgesmith.targets import codegen, isa, run
    from edgesmith.targets.ir import lower
    from edgesmith.targets.planner import plan

    g = lower(qdq, "int8", isa.macros(cc, cflags) if cc else frozenset(), "fp32", kernels)
    codegen.generate(g, plan(g), out, embedded=True)
    run.build(out)
    return out


def test_cortex_m_convs_keep_int8_weights_in_quad_order(geometry_qdq):
    """The deploying compiler is a Cortex-M7's: every conv weight is int8 (one byte a
    weight, K padded to 4), not the int16 pairs the CPU GEMM takes; a host compiler
    without VNNI still gets the pairs."""
    from edgesmith.targets import isa
    from edgesmith.targets.ir import lower

    qdq, _ = geometry_qdq
    g = lower(qdq, "int8", isa.macros(M7_CC, M7_FLAGS))
    convs = [c for st in g.steps for c in st.calls if c.fn.startswith("es_conv2d")]
    assert convs and {c.fn for c in convs} == {"es_conv2d_i8_mcu"}
    weights = [g.tensors[c.args[1].name] for c in convs]
    assert all(t.ctype == "int8_t" for t in weights)
    assert [t.shape for t in weights] == [(7, 28), (6, 64), (5, 56), (9, 8), (4, 228)]
    host = lower(qdq, "int8", frozenset({"__x86_64__"}))
    assert any(c.fn == "es_conv2d_i8_gemm" for st in host.steps for c in st.calls)


@needs_arm_gcc
def test_mcu_conv_plain_c_matches_reference_kernels_bit_for_bit(geometry_qdq, tmp_path):
    """Host build (the kernel's plain C path) against the portable reference kernels."""
    from edgesmith.targets import run

    qdq, x = geometry_qdq
    mcu = generate_for(qdq, tmp_path / "mcu")
    ref = generate_for(qdq, tmp_path / "ref", kernels="reference", cc=None)
    assert "es_conv2d_i8_mcu" in (mcu / "model.c").read_text()
    assert "es_conv2d_i8_mcu" not in (ref / "model.c").read_text()
    np.testing.assert_array_equal(run.run(mcu, x), run.run(ref, x))


def test_mcu_quads_put_each_pair_where_sxtb16_widens_it():
    """Quad (w0, w1, w2, w3) is stored (w0, w2, w1, w3): bytes 0 and 2 of the word are
    (w0, w1), bytes 1 and 3 (w2, w3); a row of 5 taps is padded to 8 with zeros."""
    from edgesmith.targets.lower.packing import mcu_quads

    w = np.arange(1, 11, dtype=np.int8).reshape(2, 5, 1, 1)
    q = mcu_quads(w)
    assert q.dtype == np.int8
    assert q.tolist() == [[1, 3, 2, 4, 5, 0, 0, 0], [6, 8, 7, 9, 10, 0, 0, 0]]
