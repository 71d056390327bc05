"""``edgesmith build`` and ``edgesmith convert``."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from edgesmith.pipeline import build as build_mod
from edgesmith.pipeline.data import SplitRule

from .app import app, out_console
from .render import RichEvents, print_whole, targets_table

MODEL_HELP = ("the model: path/to/model.py:callable, package.module:callable, a .pt state dict "
              "(with --arch) or TorchScript, or an .onnx file")
DATA_HELP = ("the data: `digits` (bundled), a .npz with x and y arrays, an image folder (one "
             "subfolder per class), or path/to/file.py:callable")
PROFILE_HELP = "device profile: a bundled name (see `edgesmith profiles list`) or a YAML file"


def _run(req: build_mod.BuildRequest, as_json: bool) -> None:
    events = RichEvents(quiet=as_json)
    outcome = build_mod.run(req, events)
    _show(outcome.manifest, req.out, as_json)  # published: shown even when it must fail
    if outcome.error is not None:
        raise outcome.error


def _show(manifest: dict, out: Path, as_json: bool) -> None:
    if as_json:
        out_console.print_json(json.dumps(build_mod.summary(manifest, out)))
        return
    print_whole(out_console, targets_table(manifest))
    out_console.print(f"manifest: {out / 'manifest.json'}   report: {out / 'report.md'}",
                      soft_wrap=True)


# options shared by `build` and `convert` (typer accepts one OptionInfo in several commands)
DATA = typer.Option("digits", "--data", "-d", help=DATA_HELP)
PROFILE = typer.Option("host", "--profile", "-p", help=PROFILE_HELP)
OUT = typer.Option(..., "--out", "-o", help="build folder (replaced atomically)")
ARCH = typer.Option(None, help="callable building the architecture of a state dict")
TRUST = typer.Option(False, help="allow arbitrary pickles in .pt (runs code!)")
TARGETS = typer.Option(None, "--target", "-t",
                       help="only these targets, FORMAT[:PRECISION]; repeatable")
NO_BUDGET = typer.Option(False, help="report budget misses instead of failing")
NO_FALLBACK = typer.Option(False, "--no-fallback",
                           help="do not keep the most sensitive layers of an INT8 target "
                                "over the accuracy budget in float (the fallback runs only "
                                "for such targets)")
FORCE = typer.Option(False, "--force", help="redo every stage; ignore the cache")
JSON = typer.Option(False, "--json", help="print the summary as JSON on stdout")
VAL_FRACTION = typer.Option(None, help="fraction of the data held out for validation "
                                       "(default 0.2; train and calibration share the rest "
                                       "7:1); the build says when the split is too small to "
                                       "judge the accuracy budget")
VAL_SAMPLES = typer.Option(None, help="validation samples to hold out, instead of "
                                      "--val-fraction")
SKIP_UNSUPPORTED = typer.Option(False, "--skip-unsupported",
                                help="build the targets that can express every node and list "
                                     "the others as skipped (with the nodes), instead of "
                                     "stopping before any work")
FINETUNE_EPOCHS = typer.Option(None, help="override compress.prune.finetune_epochs "
                                          "(fine-tune after pruning)")
FINETUNE_LR = typer.Option(None, help="override compress.prune.lr (fine-tune learning rate)")
QAT_EPOCHS = typer.Option(None, help="override compress.qat.epochs")
PREPROCESS = typer.Option(None, help="how an image folder's frames become inputs: "
                                     "resize=HxW,crop=HxW,mean=R/G/B,std=R/G/B,order=rgb|bgr,"
                                     "layout=nchw|nhwc,dtype=float32|uint8|int8, or a YAML "
                                     "file; overrides the profile's preprocess block")
TASK = typer.Option("classify", help="classify | detect | regress | raw: picks the default "
                                     "--metric (top1, map50, mse, cosine)")
METRIC = typer.Option(None, help="the primary metric the accuracy_drop budget judges: top1, "
                                 "top5, map50, map50_95, mse, cosine, or file.py:callable "
                                 "(fn(outputs, labels) -> float)")
VERIFY_RUNTIMES = typer.Option(
    False, "--verify-runtimes/--no-verify-runtimes",
    help="run every artifact on exactly the runtime release the profile declares "
         "(runtimes:), in an isolated environment cached under $XDG_CACHE_HOME/edgesmith/"
         "runtimes, and compare with the host; the static op-version check runs always")
OPSET = typer.Option(None, help="ONNX opset of the torch export (17-20; default: 17, or the "
                                "newer one the exporter names for an op 17 lacks)")


@app.command()
def build(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA,
    profile: str = PROFILE,
    out: Path = OUT,
    arch: str = ARCH,
    trust_pickle: bool = TRUST,
    target: list[str] = TARGETS,
    prune_ratio: float = typer.Option(None, help="override the profile's channel prune ratio"),
    qat: bool = typer.Option(None, "--qat/--no-qat", help="override the profile's QAT setting"),
    finetune_epochs: int = FINETUNE_EPOCHS,
    finetune_lr: float = FINETUNE_LR,
    qat_epochs: int = QAT_EPOCHS,
    no_budget: bool = NO_BUDGET,
    no_fallback: bool = NO_FALLBACK,
    seed: int = typer.Option(0, help="seed of the data split and training"),
    val_fraction: float = VAL_FRACTION,
    val_samples: int = VAL_SAMPLES,
    skip_unsupported: bool = SKIP_UNSUPPORTED,
    opset: int = OPSET,
    verify_runtimes: bool = VERIFY_RUNTIMES,
    preprocess: str = PREPROCESS,
    task: str = TASK,
    metric: str = METRIC,
    force: bool = FORCE,
    as_json: bool = JSON,
) -> None:
    """Compress (if the profile asks), export, check op compat, convert every target of
    the profile, validate each against the FP32 model, and write manifest + report.

    Example: edgesmith build examples/digits/digits.pt --arch examples/digits/model.py:build
    --data digits --profile host --out build/demo
    """
    _run(build_mod.BuildRequest(model=model, data=data, profile=profile, out=out, arch=arch,
                                trust_pickle=trust_pickle, targets=target or [],
                                prune_ratio=prune_ratio, qat=qat,
                                finetune_epochs=finetune_epochs, finetune_lr=finetune_lr,
                                qat_epochs=qat_epochs, no_budget=no_budget, no_fallback=no_fallback,
                                seed=seed,
                                use_cache=not force, split=SplitRule(val_fraction, val_samples),
                                skip_unsupported=skip_unsupported, opset=opset,
                                verify_runtimes=verify_runtimes,
                                preprocess=preprocess, task=task, metric=metric), as_json)


@app.command()
def convert(
    model: str = typer.Argument(..., help=MODEL_HELP),
    data: str = DATA,
    profile: str = PROFILE,
    out: Path = OUT,
    arch: str = ARCH,
    trust_pickle: bool = TRUST,
    target: list[str] = TARGETS,
    no_budget: bool = NO_BUDGET,
    no_fallback: bool = NO_FALLBACK,
    seed: int = typer.Option(0, help="seed of the data split"),
    val_fraction: float = VAL_FRACTION,
    val_samples: int = VAL_SAMPLES,
    skip_unsupported: bool = SKIP_UNSUPPORTED,
    opset: int = OPSET,
    verify_runtimes: bool = VERIFY_RUNTIMES,
    preprocess: str = PREPROCESS,
    task: str = TASK,
    metric: str = METRIC,
    force: bool = FORCE,
    as_json: bool = JSON,
) -> None:
    """Like `build` without compression: export, compat check, convert, validate.

    Example: edgesmith convert model.onnx --data data.npz --profile intel-nuc --out build/nuc
    --target openvino:int8
    """
    _run(build_mod.BuildRequest(model=model, data=data, profile=profile, out=out, arch=arch,
                                trust_pickle=trust_pickle, targets=target or [],
                                compress=False, no_budget=no_budget, no_fallback=no_fallback,
                                seed=seed,
                                use_cache=not force, split=SplitRule(val_fraction, val_samples),
                                skip_unsupported=skip_unsupported, opset=opset,
                                verify_runtimes=verify_runtimes,
                                preprocess=preprocess, task=task, metric=metric), as_json)
