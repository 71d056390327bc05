"""Prune + fine-tune + QAT of the trained zoo CNNs against issue 15's compression targets.

    .venv/bin/python benchmarks/compress_zoo.py [--only NAME ...] [--size 32] [--macs 0.5]
        [--finetune-epochs E] [--finetune-lr LR] [--qat-epochs E] [--qat-lr LR]
        [--threads 2] [--json]

For each asked zoo model whose checkpoint ``examples/zoo/train.py`` left in the cache, runs
the compress stage exactly as ``edgesmith compress`` does (``compress.stage.run_compress``):
prune ``--macs`` of the MACs with torch-pruning's DependencyGraph (L2 group importance, the
classifier kept), fine-tune, then NNCF QAT exported as Q/DQ ONNX and scored in
onnxruntime. The data splits are the ones the checkpoint was trained on (same reference,
same seed), so validation was never seen by training nor by any best-epoch choice.

Prints one table (``--json``: a list of rows) with the MACs before/after, top-1 of the FP32
checkpoint, of the pruned + fine-tuned model and of the QAT INT8 Q/DQ ONNX, each with its
95 % Wilson interval, the two drops with their paired (Tango) 95 % intervals, epochs, learning
rates and wall times. Targets (issue 15 item 5): fine-tuned drop <= 1.5 pt vs FP32, QAT INT8
within 0.5 pt of the pruned FP32. Exit 0 when every row meets both, 1 when one misses, 2 for
a usage error (unknown model, missing checkpoint).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "zoo"))
from catalog import ZOO, cache_dir  # noqa: E402

CNNS = ("resnet18", "mobilenetv2", "mobilenetv3_small", "efficientnet_b0")
DEFAULT_ONLY = ("resnet18", "mobilenetv2")
FT_BUDGET_PT = 1.5   # fine-tuned top-1 drop vs the FP32 checkpoint
QAT_BUDGET_PT = 0.5  # QAT INT8 top-1 drop vs the pruned + fine-tuned FP32
COLUMNS = ("model", "MACs before", "MACs after", "top-1 fp32", "top-1 pruned+ft", "drop pt",
           "top-1 QAT int8", "vs pruned pt", "ft ep (lr)", "qat ep (lr)", "wall s", "targets")


class Usage(Exception):
    """A bad request (unknown model, missing checkpoint): exit 2 with this message."""


# --- figures ---------------------------------------------------------------------------

def _pct(frac: float) -> float:
    """Percent, as a Python float (numpy scalars do not serialise to JSON)."""
    return round(100 * float(frac), 2)


def top1(correct: np.ndarray) -> dict[str, Any]:
    """Top-1 in percent with its 95 % Wilson interval, from per-sample correctness."""
    from edgesmith.pipeline.validate import wilson

    k, n = int(correct.sum()), len(correct)
    lo, hi = wilson(k, n)
    return {"top1": _pct(k / n), "ci95": [_pct(lo), _pct(hi)]}


def drop(ref: np.ndarray, art: np.ndarray) -> dict[str, Any]:
    """Drop in points (ref minus art) with the paired 95 % interval the build reports."""
    from edgesmith.pipeline.validate import paired_drop_ci

    lo, hi = paired_drop_ci(ref, art)
    return {"pt": _pct(ref.mean() - art.mean()), "ci95": [_pct(lo), _pct(hi)]}


def verdicts(row: dict[str, Any]) -> dict[str, bool]:
    """The issue's targets for one row (point estimates; the intervals say how sure)."""
    return {"macs_removed": bool(row["macs_reduction"] >= row["macs_target"] - 1e-9),
            f"finetune_drop_le_{FT_BUDGET_PT}pt": bool(row["drop_finetune"]["pt"]
                                                       <= FT_BUDGET_PT),
            f"qat_within_{QAT_BUDGET_PT}pt_of_pruned": bool(row["drop_qat_vs_pruned"]["pt"]
                                                            <= QAT_BUDGET_PT)}


# --- one model -------------------------------------------------------------------------

def checkpoint(name: str, size: int) -> tuple[Path, Any]:
    """The cached checkpoint of ``name`` at ``size`` and its catalog entry."""
    if name not in ZOO:
        raise Usage(f"unknown zoo model {name!r}; the zoo has {', '.join(sorted(ZOO))}")
    entry = ZOO[name]
    if name not in CNNS:
        raise Usage(f"{name} is not one of the zoo CNNs this benchmark prunes "
                    f"({', '.join(CNNS)})")
    if size not in entry.sizes:
        raise Usage(f"{name} has no input size {size}; use --size "
                    f"{' or '.join(map(str, entry.sizes))}")
    ckpt = cache_dir() / f"{entry.stem(size)}.pt"
    if not ckpt.is_file():
        raise Usage(f"no checkpoint {ckpt}; train it first: .venv/bin/python "
                    f"examples/zoo/train.py {name} --size {size}")
    return ckpt, entry


def profile(args: argparse.Namespace) -> Any:
    """The compress settings under test, as a profile (the CLI flags' values)."""
    from edgesmith.profiles.schema import Profile

    return Profile.model_validate({
        "name": "compress-zoo", "device": {"name": "host", "arch": "x86_64", "ram_mb": 4000},
        "targets": [{"format": "onnx", "precision": "int8"}],
        "compress": {
            "prune": {"enabled": True, "macs_reduction": args.macs, "importance": "l2",
                      "finetune_epochs": args.finetune_epochs, "lr": args.finetune_lr},
            "qat": {"enabled": True, "epochs": args.qat_epochs, "lr": args.qat_lr},
            "calibration": {"samples": 200, "method": "minmax"},
            "train": {"optimizer": "adamw", "batch_size": 64, "seed": 0,
                      "patience": max(1, args.finetune_epochs)},
        },
        "budgets": {"accuracy_drop": FT_BUDGET_PT},
    })


def _correct(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.asarray(logits).argmax(axis=1) == np.asarray(y)


def _ort_logits(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: np.ascontiguousarray(x, np.float32)})[0]


def run_one(name: str, args: argparse.Namespace, progress: Any = None) -> dict[str, Any]:
    """Compress one zoo model and measure every figure of its row on the validation split."""
    from edgesmith.compress.stage import run_compress
    from edgesmith.compress.train import predict
    from edgesmith.pipeline import data as pipeline_data
    from edgesmith.pipeline import model as pipeline_model

    ckpt, entry = checkpoint(name, args.size)
    splits = pipeline_data.load(entry.data_ref(args.size), seed=0)
    model = pipeline_model.load(str(ckpt), arch=entry.arch(args.size)).torch_model.eval()
    y = splits.val_y
    ok_fp32 = _correct(predict(model, splits.val_x), y)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="compress-zoo-") as out:
        res = run_compress(model, splits, profile(args), Path(out), no_budget=True,
                           progress=progress)
        ok_ft = _correct(predict(res.model, splits.val_x), y)
        ok_q = _correct(_ort_logits(res.paths["onnx_qdq"], splits.val_x), y)
    wall = time.perf_counter() - start
    pr, q = res.section["prune"], res.section["qat"]
    row = {
        "model": name, "data": entry.stem(args.size), "val_samples": len(y),
        "macs_target": args.macs, "macs_before": pr["macs_before"], "macs_after": pr["macs_after"],
        "macs_reduction": pr["macs_reduction"], "params_before": pr["params_before"],
        "params_after": pr["params_after"],
        "fp32": top1(ok_fp32), "pruned_no_finetune": _pct(pr["accuracy_pruned"]),
        "pruned_finetuned": top1(ok_ft), "qat_int8": top1(ok_q),
        "drop_finetune": drop(ok_fp32, ok_ft), "drop_qat_vs_pruned": drop(ok_ft, ok_q),
        "drop_qat_vs_fp32": drop(ok_fp32, ok_q),
        "finetune": {**pr["finetune"], "seconds": pr["seconds"]},
        "qat": {"epochs": q["epochs"], "epochs_run": q["epochs_run"], "best_epoch": q["best_epoch"],
                "lr": q["lr"], "ptq_init_top1": _pct(q["accuracy_ptq_torch"]),
                "seconds": q["seconds"]},
        "wall_s": round(wall, 1), "torch_threads": args.threads,
    }
    row["targets"] = verdicts(row)
    return row


# --- output ----------------------------------------------------------------------------

def _fig(f: dict[str, Any]) -> str:
    return f"{f['top1']:.1f} [{f['ci95'][0]:.1f}, {f['ci95'][1]:.1f}]"


def _drop(d: dict[str, Any]) -> str:
    return f"{d['pt']:+.1f} [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"


def cells(row: dict[str, Any]) -> list[str]:
    """One table line's cells (top-1 and drops in percent / points with 95 % intervals)."""
    ft, q = row["finetune"], row["qat"]
    met = "met" if all(row["targets"].values()) else "missed: " + ", ".join(
        k for k, v in row["targets"].items() if not v)
    return [row["model"], f"{row['macs_before'] / 1e6:.1f} M",
            f"{row['macs_after'] / 1e6:.1f} M (-{100 * row['macs_reduction']:.0f} %)",
            _fig(row["fp32"]), _fig(row["pruned_finetuned"]), _drop(row["drop_finetune"]),
            _fig(row["qat_int8"]), _drop(row["drop_qat_vs_pruned"]),
            f"{ft['epochs_run']}/{ft['epochs']} ({ft['lr']:g})",
            f"{q['epochs_run']}/{q['epochs']} ({q['lr']:g})", f"{row['wall_s']:.0f}", met]


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of ``rows`` (the README pastes it as printed)."""
    lines = [cells(r) for r in rows]
    widths = [max(len(c), *(len(ln[i]) for ln in lines)) for i, c in enumerate(COLUMNS)]

    def fmt(cs: list[str] | tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cs, widths, strict=True)) + " |"

    return "\n".join([fmt(COLUMNS), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *(fmt(ln) for ln in lines)])


# --- command line ----------------------------------------------------------------------

def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", metavar="NAME",
                   help=f"zoo CNN to compress (repeatable; default {' and '.join(DEFAULT_ONLY)})")
    p.add_argument("--size", type=int, default=32, help="input size of the checkpoint")
    p.add_argument("--macs", type=float, default=0.5, help="fraction of MACs to remove")
    p.add_argument("--finetune-epochs", type=int, default=8)
    p.add_argument("--finetune-lr", type=float, default=1e-3, help="AdamW, cosine schedule")
    p.add_argument("--qat-epochs", type=int, default=2)
    p.add_argument("--qat-lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (on a loaded shared CPU 2 threads spin: ~30x slower)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    names = args.only or list(DEFAULT_ONLY)
    try:
        for name in names:  # every request checked before any work
            checkpoint(name, args.size)
    except Usage as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(max(1, args.threads))
    rows = []
    for name in names:
        print(f"{name}: prune {args.macs:.0%} MACs, fine-tune {args.finetune_epochs} ep, "
              f"QAT {args.qat_epochs} ep", file=sys.stderr, flush=True)
        rows.append(run_one(name, args, progress=_stderr_progress(name)))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)  # a long run keeps each row
    print(json.dumps(rows, indent=2) if args.json else table(rows))
    return 0 if all(all(r["targets"].values()) for r in rows) else 1


def _stderr_progress(name: str) -> Any:
    def show(ev: dict[str, Any]) -> None:
        if ev.get("event") == "epoch":
            print(f"  {time.strftime('%H:%M:%S')} {name} {ev['stage']} {ev['epoch']}/"
                  f"{ev['epochs']}: loss {ev['loss']:.4f}, "
                  f"selection top-1 {100 * ev['selection_accuracy']:.1f} %", file=sys.stderr,
                  flush=True)
        elif ev.get("event") == "done":
            print(f"  {name} {ev['stage']} done: val top-1 {100 * ev['accuracy']:.1f} %",
                  file=sys.stderr, flush=True)
    return show


if __name__ == "__main__":
    sys.exit(main())
