"""The full zoo MobileNetV2 at 96x96 as an int8 Cortex-M7 build (benchmarks/
mcu_mobilenetv2.py's figures): its flash is the embedded weights blob (int8 weights, and
an int32 bias, multiplier and shift per output channel) plus code and plan tables under
64 KB, the blob is int8 weights but for the per-channel words, and the image runs on QEMU's
mps2-an500 (Cortex-M7) and, with the Helium kernels, on mps3-an547 (Cortex-M55, weights in
its QSPI flash) with the host build's output bit for bit."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_tools

pytestmark = pytest.mark.very_slow
BENCH = Path(__file__).parents[2] / "benchmarks" / "mcu_mobilenetv2.py"


def _bench():
    spec = importlib.util.spec_from_file_location("mcu_mobilenetv2", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def mnv2_96(tmp_path_factory):
    """(the QDQ model, 9 random inputs) of the zoo MobileNetV2 at 96 (random weights)."""
    import torch

    from tests.targets._helpers import _qdq, export

    tmp = tmp_path_factory.mktemp("mnv2_96")
    net, _ = _bench().load_model()
    x = np.random.default_rng(0).standard_normal((9, 3, 96, 96)).astype(np.float32)
    return _qdq(export(net, torch.from_numpy(x[:1]), tmp / "m.onnx"), x[:8], tmp / "q.onnx"), x


def _folder(qdq: Path, out: Path, cflags: str) -> Path:
    """The generated folder, not built (mcu_size.measure reads objects it finds there)."""
    from edgesmith.targets import codegen, mcu_qemu

    codegen.from_onnx(qdq, out, precision="int8", embedded=True, deploy_cc=mcu_qemu.CC,
                      deploy_cflags=cflags)
    return out


def test_mobilenetv2_96_m7_flash_is_int8_weights_plus_code_and_runs_on_qemu(mnv2_96, tmp_path):
    from edgesmith.targets import mcu_qemu, mcu_size, run

    require_tools("qemu-system-arm", mcu_qemu.CC)
    bench, (qdq, x) = _bench(), mnv2_96
    folder = _folder(qdq, tmp_path / "c", mcu_qemu.CFLAGS)
    s = mcu_size.measure(folder, mcu_qemu.CC, mcu_qemu.CFLAGS)
    blob = bench.blob_bytes(folder)
    channels = blob["int32_bias"] // 4
    assert blob["int32_mult"] == blob["int32_shift"] == blob["int32_bias"]
    # int8 weights, one byte each (K padded to 4 at most): not the CPU's int16 pairs
    onnx_w = bench.int8_weight_bytes(qdq)
    assert onnx_w <= blob["int8_weights"] <= onnx_w + 3 * channels
    assert 0 < s.flash - sum(blob.values()) < 64 * 1024 and s.text < 32 * 1024
    run.build(folder)
    np.testing.assert_array_equal(mcu_qemu.run(folder, x[8:9]), run.run(folder, x[8:9]))


def test_mobilenetv2_96_on_emulated_cortex_m55_equals_host(mnv2_96, tmp_path):
    """The Helium kernels on every conv of a whole network; the 2.4 MB of weights in the
    board's QSPI flash (its 512 KB ITCM holds the code)."""
    from edgesmith.targets import mcu_qemu, run

    require_tools("qemu-system-arm", mcu_qemu.CC)
    qdq, x = mnv2_96
    folder = _folder(qdq, tmp_path / "c55", mcu_qemu.M55_CFLAGS)
    run.build(folder)
    np.testing.assert_array_equal(mcu_qemu.run(folder, x[8:9], cflags=mcu_qemu.M55_CFLAGS),
                                  run.run(folder, x[8:9]))
