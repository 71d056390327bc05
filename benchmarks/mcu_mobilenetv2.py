"""MobileNetV2-96 (examples/zoo/mobilenetv2.py, width 1.0, 10 classes) as an int8
Cortex-M7 build: flash and RAM from arm-none-eabi-size against the int8 weight bytes,
whether it fits a real Cortex-M7 part, and a run on QEMU's mps2-an500 against the host
build of the same folder (bit for bit).

Weights: the zoo's trained checkpoint at 96 (~/.cache/edgesmith/zoo/mobilenetv2-digits96.pt)
when there is one, else freshly initialised (random) weights, which the output says.
Calibration: digits96 images (examples/zoo/data.py, 64 samples).

    .venv/bin/python benchmarks/mcu_mobilenetv2.py [--out DIR] [--samples 2] [--cflags ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PART = {"name": "STM32H743 (2 MB flash, 1 MB SRAM)", "flash": 2 * 1024 * 1024,
        "ram": 1024 * 1024}


def load_model():
    """(the network, 'trained' or 'random'): the 96 checkpoint if the zoo has one."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "zoo"))
    import catalog  # noqa: E402
    import mobilenetv2  # noqa: E402

    net = mobilenetv2.build()
    ckpt = catalog.cache_dir() / "mobilenetv2-digits96.pt"
    if ckpt.is_file():
        net.load_state_dict(torch.load(ckpt, weights_only=True))
        return net.eval(), "trained"
    return net.eval(), "random"


def int8_weight_bytes(qdq: Path) -> int:
    """Bytes of the QDQ model's int8 weight tensors (its per-channel zero points aside)."""
    import onnx
    from onnx import TensorProto

    m = onnx.load(str(qdq))
    return sum(int(np.prod(t.dims)) for t in m.graph.initializer
               if t.data_type == TensorProto.INT8 and len(t.dims) > 1)


def blob_bytes(folder: Path) -> dict[str, int]:
    """The embedded weights blob by kind, from model.c's tensor table: int8 weights, and
    the int32 bias / requant multiplier / shift of each output channel."""
    import re

    out: dict[str, int] = {}
    text = (folder / "model.c").read_text()
    for name, ctype, n in re.findall(r"#define T_(\w+) \(W \+ \d+\) /\* (\w+) \[[^\]]*\], "
                                     r"(\d+) B \*/", text):
        kind = "int8_weights" if ctype == "int8_t" else "int32_" + name.rsplit("_", 1)[-1]
        out[kind] = out.get(kind, 0) + int(n)
    return out


def main(argv: list[str] | None = None) -> int:
    from edgesmith.targets import codegen, mcu_qemu, mcu_size, run
    from tests.targets._helpers import _qdq, export

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="keep the C folder here (default: a temp dir)")
    ap.add_argument("--samples", type=int, default=2, help="inputs run on the emulated MCU")
    ap.add_argument("--cflags", default=mcu_qemu.CFLAGS)
    a = ap.parse_args(argv)
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "zoo"))
    import data  # noqa: E402

    net, weights = load_model()
    splits = data.digits(96, n_train=10, n_calib=64, n_val=max(a.samples, 1))
    calib, val = splits["calib"][0], splits["val"][0][:a.samples]
    with tempfile.TemporaryDirectory(prefix="es_mnv2_m7_") as tmp:
        work = Path(tmp)
        fp32 = export(net, torch.from_numpy(calib[:1]), work / "mnv2_96.onnx")
        qdq = _qdq(fp32, calib, work / "mnv2_96_qdq.onnx")
        folder = a.out or work / "c-int8"
        codegen.from_onnx(qdq, folder, precision="int8", embedded=True,
                          deploy_cc=mcu_qemu.CC, deploy_cflags=a.cflags)
        s = mcu_size.measure(folder, mcu_qemu.CC, a.cflags)
        blob = blob_bytes(folder)
        res = {"model": "MobileNetV2 width 1.0, 3x96x96, 10 classes", "weights": weights,
               "cflags": a.cflags, "text": s.text, "rodata": s.rodata, "data": s.data,
               "bss": s.bss, "arena": s.arena, "stack": s.stack, "flash": s.flash,
               "ram": s.ram, "onnx_int8_weight_bytes": int8_weight_bytes(qdq),
               "weights_blob": blob, "flash_minus_blob": s.flash - sum(blob.values()),
               "part": PART["name"], "fits_flash": s.flash <= PART["flash"],
               "fits_ram": s.ram <= PART["ram"]}
        run.build(folder)
        host = run.run(folder, val)
        t0 = time.perf_counter()
        try:
            on_mcu = mcu_qemu.run(folder, val, cflags=a.cflags)
            res["qemu"] = {"machine": mcu_qemu.board_for(mcu_qemu.CC, a.cflags).machine,
                           "samples": len(val), "equal_to_host": bool(np.array_equal(
                               on_mcu, host)), "seconds": round(time.perf_counter() - t0, 1)}
        except Exception as e:  # noqa: BLE001 - reported as the figure, not hidden
            res["qemu"] = {"error": str(e)}
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
