"""``edgesmith compress``: prune -> fine-tune -> QAT, each step gated on accuracy."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .app import app, err_console, out_console

MODEL_HELP = ("the model: path/to/model.py:callable, package.module:callable, or a .pt state "
              "dict (with --arch) / full module (with --trust-pickle)")
DATA_HELP = "the data: `digits` (bundled), a .npz with x and y arrays, or path/to/file.py:callable"
PROFILE_HELP = "device profile: a bundled name (see `edgesmith profiles list`) or a YAML file"


class _Bars:
    """One rich bar per training stage: epochs done, last loss and val accuracy."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.tasks: dict[str, Any] = {}

    def __call__(self, ev: dict[str, Any]) -> None:
        stage, kind = ev["stage"], ev["event"]
        if kind == "start":
            self.tasks[stage] = self.progress.add_task(stage, total=max(1, ev["epochs"]),
                                                       figures="")
        elif kind == "epoch" and stage in self.tasks:
            self.progress.update(self.tasks[stage], completed=ev["epoch"],
                                 figures=f"loss {ev['loss']:.4f}  "
                                         f"select {ev['selection_accuracy']:.2%}")
        elif kind == "done" and stage in self.tasks:
            task = self.tasks[stage]
            self.progress.update(task, completed=self.progress.tasks[task].total,
                                 figures=f"val {ev['accuracy']:.2%}")


@app.command()
def compress(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = typer.Option("digits", "--data", "-d", help=DATA_HELP),
    profile: str = typer.Option("host", "--profile", "-p", help=PROFILE_HELP),
    out: Path = typer.Option(..., "--out", "-o", help="output folder"),
    prune_ratio: float = typer.Option(None, help="channel prune ratio in (0, 1); overrides "
                                                 "the profile and enables pruning"),
    qat: bool = typer.Option(None, "--qat/--no-qat", help="override the profile's QAT setting"),
    finetune_epochs: int = typer.Option(None, help="override compress.prune.finetune_epochs "
                                                   "(fine-tune after pruning)"),
    finetune_lr: float = typer.Option(None, help="override compress.prune.lr (fine-tune "
                                                 "learning rate)"),
    qat_epochs: int = typer.Option(None, help="override compress.qat.epochs"),
    no_budget: bool = typer.Option(False, help="report accuracy-budget misses, don't fail"),
    arch: str = typer.Option(None, help="callable building the architecture of a state dict"),
    trust_pickle: bool = typer.Option(False, help="allow arbitrary pickles in .pt (runs code!)"),
    seed: int = typer.Option(0, help="seed of the data split and training"),
    as_json: bool = typer.Option(False, "--json", help="print the compress section as JSON"),
) -> None:
    """Prune channels, fine-tune and quantization-aware train a model, gating every step on
    the profile's accuracy budget. Writes model.pt (TorchScript), model.onnx,
    model_qdq.onnx (with QAT) and manifest.json to --out.

    Example: edgesmith compress examples/digits/digits.pt --arch examples/digits/model.py:build
    --data digits --profile host --out build/compressed --prune-ratio 0.3 --qat
    --finetune-epochs 5 --finetune-lr 0.02 --qat-epochs 2
    """
    # compress/ imports torch (~2-4 s): only this command pays it, not `edgesmith --help`
    from edgesmith.compress.stage import Overrides
    from edgesmith.pipeline.compress import compress_refs

    bars = None if as_json else Progress(
        TextColumn("[bold]{task.description:<9}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[figures]}"), TimeElapsedColumn(),
        console=err_console, transient=False)
    with bars if bars is not None else nullcontext():
        manifest = compress_refs(model, data, profile, out, arch=arch, trust_pickle=trust_pickle,
                                 seed=seed, no_budget=no_budget,
                                 overrides=Overrides(prune_ratio=prune_ratio, qat=qat,
                                                     finetune_epochs=finetune_epochs,
                                                     finetune_lr=finetune_lr,
                                                     qat_epochs=qat_epochs),
                                 progress=_Bars(bars) if bars is not None else None)
    section = manifest["compress"]
    if as_json:
        out_console.print_json(json.dumps(section, default=str))
        return
    _summary(section, out)


def _summary(section: dict[str, Any], out: Path) -> None:
    p, q = section.get("prune"), section.get("qat")
    lines = [f"FP32 val top-1 {section['accuracy_fp32']:.2%}"]
    if p:
        lines.append(f"prune: MACs {p['macs_before']:,} -> {p['macs_after']:,} "
                     f"(-{p['macs_reduction']:.1%}), params {p['params_before']:,} -> "
                     f"{p['params_after']:,}, top-1 {p['accuracy_after']:.2%}")
    if q:
        lines.append(f"QAT INT8 (QDQ ONNX, onnxruntime): top-1 {q['accuracy_after']:.2%} "
                     f"after {q['epochs_run']} epochs")
    for g in section.get("gates", []):
        mark = "[green]ok[/]" if g["ok"] else "[red]over budget[/]"
        lines.append(f"gate {g['step']}: drop {g['drop_points']:.2f} pts "
                     f"(budget {g['budget_points']}) {mark}")
    for line in lines:
        out_console.print(line)
    out_console.print(f"manifest: {out / 'manifest.json'}")
