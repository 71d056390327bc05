"""The compress stage on the digits demo, against the issue's targets. Prints one JSON document.

    .venv/bin/python benchmarks/compress_digits.py [--threads N] [--macs 0.5] [--qat-epochs 3]

1. trains the FP32 baseline (a few seconds, seeded);
2. runs ``run_compress``: prune 50 % of the MACs (L2 group importance) -> fine-tune ->
   NNCF QAT INT8 -> Q/DQ ONNX, exactly as ``edgesmith compress`` does;
3. checks: pruned + fine-tuned drop <= 1.0 pt, QAT INT8 (measured on the exported Q/DQ
   ONNX in onnxruntime) drop <= 0.5 pt vs the FP32 baseline, whole stage <= 60 s.

The first QAT run on a machine also builds NNCF's C++ extension (about a minute on 2 cores,
then cached); the JSON says whether the build was already there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--macs", type=float, default=0.5, help="MACs reduction target")
    p.add_argument("--finetune-epochs", type=int, default=15)
    p.add_argument("--qat-epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    import torch

    from edgesmith.compress import nncf_env
    from edgesmith.compress.stage import run_compress
    from edgesmith.compress.train import evaluate, fit
    from edgesmith.pipeline.data import digits
    from edgesmith.pipeline.model import load
    from edgesmith.profiles.schema import Profile

    if args.threads:
        torch.set_num_threads(args.threads)
    ext_dir = nncf_env.extensions_root()
    extension_cached = any(ext_dir.rglob("quantized_functions_cpu.so"))

    splits = digits(args.seed)
    model = load(f"{REPO}/examples/digits/model.py:build").torch_model
    t0 = time.perf_counter()
    fit(model, splits, epochs=10, lr=0.05, seed=args.seed)
    t_base = time.perf_counter() - t0
    fp32 = evaluate(model, splits.val_x, splits.val_y)

    profile = Profile.model_validate({
        "name": "bench", "device": {"name": "host", "arch": "x86_64", "ram_mb": 1000},
        "targets": [{"format": "onnx", "precision": "int8"}],
        "compress": {
            "prune": {"enabled": True, "macs_reduction": args.macs, "importance": "l2",
                      "finetune_epochs": args.finetune_epochs, "lr": 0.01},
            "qat": {"enabled": True, "epochs": args.qat_epochs, "lr": 1e-3},
            "calibration": {"samples": 300, "method": "minmax"},
            "train": {"seed": args.seed},
        },
        "budgets": {"accuracy_drop": 1.0},
    })
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        res = run_compress(model, splits, profile, Path(out), no_budget=True)
        t_stage = time.perf_counter() - t0
        sizes = {k: v["size_bytes"] for k, v in res.section["artifacts"].items()}
    pr, q = res.section["prune"], res.section["qat"]
    prune_drop = 100 * (fp32 - pr["accuracy_after"])
    qat_drop = 100 * (fp32 - q["accuracy_after"])
    report = {
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                 "torch_threads": torch.get_num_threads(),
                 "nncf_extension_cached_before": extension_cached},
        "baseline": {"val_top1": fp32, "train_seconds": round(t_base, 2),
                     "val_samples": len(splits.val_x)},
        "prune": {"macs_before": pr["macs_before"], "macs_after": pr["macs_after"],
                  "macs_reduction": pr["macs_reduction"], "params_before": pr["params_before"],
                  "params_after": pr["params_after"], "onnx_bytes_before": pr["onnx_bytes_before"],
                  "onnx_bytes_after": pr["onnx_bytes_after"],
                  "val_top1_pruned_no_finetune": pr["accuracy_pruned"],
                  "val_top1_after_finetune": pr["accuracy_after"],
                  "drop_points": round(prune_drop, 3), "finetune_epochs_run":
                  pr["finetune"]["epochs_run"], "seconds": pr["seconds"]},
        "qat": {"val_top1_qdq_onnxruntime": q["accuracy_after"],
                "val_top1_torch": q["accuracy_after_torch"],
                "val_top1_ptq_init": q["accuracy_ptq_torch"],
                "drop_points_vs_fp32_baseline": round(qat_drop, 3),
                "drop_points_vs_pruned_fp32": round(100 * (q["accuracy_before"]
                                                           - q["accuracy_after"]), 3),
                "qdq_nodes": q["qdq_nodes"], "epochs_run": q["epochs_run"],
                "seconds": q["seconds"]},
        "artifact_bytes": sizes,
        "stage_seconds": round(t_stage, 2),
        "targets": {
            "macs_removed_ge_50pct": pr["macs_reduction"] >= 0.5,
            "prune_drop_le_1pt": prune_drop <= 1.0,
            "qat_int8_drop_le_0.5pt": qat_drop <= 0.5,
            "stage_le_60s": t_stage <= 60.0,
        },
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0 if all(report["targets"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
