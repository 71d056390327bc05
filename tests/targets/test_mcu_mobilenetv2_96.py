"""The full zoo MobileNetV2 at 96x96 as an int8 Cortex-M7 build (benchmarks/
mcu_mobilenetv2.py's figures): its flash is the embedded weights blob (int8 weights, and
an int32 bias, multiplier and shift per output channel) plus code and plan tables under
64 KB, the blob is int8 weights but for the per-channel words, and the image runs on QEMU's
mps2-an500 with the host build's output bit for bit."""

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


def test_mobilenetv2_96_m7_flash_is_int8_weights_plus_code_and_runs_on_qemu(tmp_path):
    import torch

    from edgesmith.targets import codegen, mcu_qemu, mcu_size, run
    from tests.targets._helpers import _qdq, export

    require_tools("qemu-system-arm", mcu_qemu.CC)
    bench = _bench()
    net, _ = bench.load_model()
    x = np.random.default_rng(0).standard_normal((9, 3, 96, 96)).astype(np.float32)
    qdq = _qdq(export(net, torch.from_numpy(x[:1]), tmp_path / "m.onnx"), x[:8],
               tmp_path / "q.onnx")
    folder = tmp_path / "c"
    codegen.from_onnx(qdq, folder, precision="int8", embedded=True, deploy_cc=mcu_qemu.CC,
                      deploy_cflags=mcu_qemu.CFLAGS)
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
