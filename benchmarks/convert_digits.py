"""Every converter x precision on the digits demo and on the MobileNetV2-style network.

For each artifact: top-1 accuracy and its drop vs the FP32 ONNX, output parity (max abs
error, cosine) vs FP32, size and its ratio to the same format's FP32 artifact, host p50
latency (single sample, 50 runs after 5 warm-up). Prints one JSON document; one run.

    .venv/bin/python benchmarks/convert_digits.py [--quick] [--models digits,mobilenetv2]

Targets (issue 5): INT8 drop <= 0.5 pt for tflite, openvino and onnx (QDQ);
INT8 size <= 0.3x FP32.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edgesmith.compress.calibration import CalibrationSet  # noqa: E402
from edgesmith.convert.onnx_qdq import quantize_qdq  # noqa: E402
from edgesmith.pipeline import registry  # noqa: E402
from edgesmith.pipeline.data import InputSpec, digits  # noqa: E402
from edgesmith.profiles.schema import TargetSpec  # noqa: E402
from edgesmith.target import ConvertContext  # noqa: E402

FORMATS = {"onnx": ["fp32", "fp16", "int8"], "tflite": ["fp32", "fp16", "int8"],
           "openvino": ["fp32", "fp16", "int8"], "coreml": ["fp32", "fp16", "int8"]}


def _digits():
    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    from model import build
    from train import train

    ckpt = ROOT / "examples" / "digits" / "digits.pt"
    if ckpt.is_file():
        model = build()
        model.load_state_dict(torch.load(ckpt, weights_only=True))
    else:
        model, _ = train()
    s = digits()
    return model.eval(), s.spec.shape, s.calib_x[:300], s.val_x, s.val_y


def _mobilenet():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "mobilenetv2_model", ROOT / "examples" / "mobilenetv2" / "model.py")
    mnv2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mnv2)

    x, y = mnv2.sample_data(512)
    return mnv2.build().eval(), tuple(mnv2.INPUT_SHAPE), x[:256], x[256:], y[256:]


def _latency_ms(run, x, runs=50, warmup=5) -> float:
    for _ in range(warmup):
        run(x)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        run(x)
        times.append((time.perf_counter() - t) * 1e3)
    return float(np.median(times))


def _parity(y, ref):
    a, b = y.reshape(len(y), -1).astype(np.float64), ref.reshape(len(ref), -1)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)
    return {"max_abs_err": float(np.abs(a - b).max()), "cosine": float(cos.mean())}


def bench_model(name, model, shape, calib_x, val_x, val_y, folder: Path, quick: bool):
    from edgesmith.convert.export import export_onnx, trace_torchscript

    onnx_path = export_onnx(model, (1, *shape), folder / "model.onnx")
    ts = trace_torchscript(model, (1, *shape), folder / "model.ts")
    with torch.no_grad():
        ref = model(torch.from_numpy(val_x)).numpy()
    ref_acc = float((ref.argmax(1) == val_y).mean())
    calib = CalibrationSet(x=np.ascontiguousarray(calib_x, np.float32), requested=len(calib_x))
    rows, fp32_size = [], {}
    for fmt, precisions in FORMATS.items():
        target = registry.get(fmt)
        for precision in precisions:
            tname = f"{fmt}-{precision}"
            static_qdq = (quantize_qdq(onnx_path, calib, folder / "work" / "qdq.onnx")
                          if precision == "int8" and target.uses_static_qdq else None)
            ctx = ConvertContext(
                fp32_onnx=onnx_path, spec=InputSpec(shape=tuple(shape)), calib=calib,
                target=TargetSpec(format=fmt, precision=precision),
                options=target.Options(), profile=None, out_dir=folder / "targets" / tname,
                work_dir=folder / "work", log_path=folder / "logs" / f"{tname}.log",
                torchscript=ts, static_qdq=static_qdq)
            row = {"model": name, "target": tname}
            ctx.out_dir.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            try:
                art = target.convert(ctx)
            except Exception as e:  # report and go on: one format must not hide the others
                rows.append({**row, "status": "error", "error": str(e).splitlines()[0]})
                continue
            row["convert_s"] = round(time.perf_counter() - t0, 2)
            size = art.meta.get("size_bytes") or art.size_bytes
            if precision == "fp32":
                fp32_size[fmt] = size
            row.update(size_bytes=size, size_ratio=round(size / fp32_size[fmt], 3)
                       if fmt in fp32_size else None)
            if "weights_bytes" in art.meta:
                row["weights_bytes"] = art.meta["weights_bytes"]
            run = target.runner(art)
            if run is None:
                rows.append({**row, "status": "not run here",
                             "reason": target.not_runnable_reason})
                continue
            y = run(val_x)
            acc = float((y.argmax(1) == val_y).mean())
            row.update(status="ok", accuracy=round(acc, 4),
                       accuracy_drop_pt=round(100 * (ref_acc - acc), 2),
                       parity=_parity(y, ref),
                       latency_ms_p50=None if quick else round(_latency_ms(run, val_x[:1]), 4))
            rows.append(row)
    return {"model": name, "reference_accuracy": ref_acc, "val_samples": len(val_x),
            "calib_samples": len(calib_x), "targets": rows}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="digits,mobilenetv2")
    ap.add_argument("--quick", action="store_true", help="skip latency")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()
    torch.manual_seed(0)
    results = {}
    with tempfile.TemporaryDirectory(prefix="edgesmith-bench-") as tmp:
        for name in args.models.split(","):
            loaded = _digits() if name == "digits" else _mobilenet()
            results[name] = bench_model(name, *loaded, Path(tmp) / name, args.quick)
    checks = {}
    for name, res in results.items():
        for r in res["targets"]:
            if r["target"].endswith("-int8") and r.get("status") == "ok":
                fmt = r["target"].split("-")[0]
                checks[f"{name}/{r['target']}"] = {
                    "drop_le_0.5pt": r["accuracy_drop_pt"] <= 0.5,
                    "size_le_0.3x": r["size_ratio"] is not None and r["size_ratio"] <= 0.3,
                    "format": fmt}
    doc = {"results": results, "targets_met": checks}
    text = json.dumps(doc, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
