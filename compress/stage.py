"""The compress stage: prune -> fine-tune -> QAT, each step measured and gated.

``edgesmith compress`` and ``edgesmith build`` both call :func:`run_compress`. It never
changes the caller's model; it writes, under ``out_dir``:

- ``model.pt``        TorchScript trace of the compressed FP32 model (``pipeline.model.load``
                      reads it back; a pruned state dict no longer fits the original class)
- ``model_state.pt``  its state dict
- ``model.onnx``      its FP32 ONNX export (dynamic batch)
- ``model_qdq.onnx``  with QAT: the INT8 Q/DQ ONNX, scored in onnxruntime
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError
from torch import nn

from edgesmith.artifact import sha256_path
from edgesmith.errors import BudgetError, ModelLoadError, UsageError

from . import gates
from .artifacts import export_onnx, save_state_dict, save_torchscript
from .train import evaluate, fit

Progress = Callable[[dict[str, Any]], None]


@dataclass
class CompressResult:
    section: dict[str, Any]            # the manifest's "compress" section
    model: nn.Module                   # the compressed FP32 model (eval mode)
    paths: dict[str, Path] = field(default_factory=dict)  # model_pt, state_dict, onnx, onnx_qdq
    # a step over the accuracy budget: the run stopped there, ``section`` has its figures
    error: BudgetError | None = None

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest's ``compress`` section (same object as ``section``)."""
        return self.section

    @property
    def qdq_onnx(self) -> Path | None:
        return self.paths.get("onnx_qdq")


def _relay(progress: Progress | None, events: Any, stage: str) -> Progress | None:
    if progress is None and events is None:
        return None

    def relay(ev: dict[str, Any]) -> None:
        if progress is not None:
            progress({"stage": stage, "event": "epoch", **ev})
        if events is not None:
            events.epoch(stage, ev["epoch"], ev["epochs"], loss=ev["loss"],
                         select_acc=ev["selection_accuracy"])
    return relay


def _emit(progress: Progress | None, **ev: Any) -> None:
    if progress is not None:
        progress(ev)


def _stage(events: Any, name: str, detail: str) -> Any:
    return events.stage(name, detail) if events is not None else contextlib.nullcontext()


def _gate(section: dict[str, Any], step: str, fp32: float, after: float, budget: float | None,
          no_budget: bool, fix: str) -> BudgetError | None:
    """Record the verdict; the BudgetError of a miss that ``no_budget`` does not waive."""
    verdict = gates.check(step, fp32, after, budget)
    section["gates"].append(verdict.to_json())
    return None if no_budget else verdict.error(fix)


def _describe(p: Any) -> str:
    target = f"ratio {p.ratio}" if p.ratio is not None else f"MACs -{p.macs_reduction:.0%}"
    return f"{target}, {p.importance} importance"


def _prune_fix(prune_cfg: Any) -> str:
    target = (f"ratio {prune_cfg.ratio}" if prune_cfg.ratio is not None
              else f"macs_reduction {prune_cfg.macs_reduction}")
    return (f"lower the pruning target (now {target}) or raise "
            f"compress.prune.finetune_epochs (now {prune_cfg.finetune_epochs}; "
            "--finetune-epochs on the command line)")


def _qat_fix(qat_cfg: Any) -> str:
    return (f"raise compress.qat.epochs (now {qat_cfg.epochs}; --qat-epochs), try preset "
            "'mixed', or add sensitive layers (the first conv, the classifier) to "
            "compress.qat.ignored_scopes")


# the CLI flags that override a profile's training settings, by (section, field)
_FLAGS = {("prune", "finetune_epochs"): "--finetune-epochs", ("prune", "lr"): "--finetune-lr",
          ("qat", "epochs"): "--qat-epochs"}


@dataclass(frozen=True)
class Overrides:
    """What the CLI may set over a profile's ``compress`` section; None = the profile's."""

    prune_ratio: float | None = None
    qat: bool | None = None
    finetune_epochs: int | None = None
    finetune_lr: float | None = None
    qat_epochs: int | None = None


def apply_overrides(cfg: Any, overrides: Overrides = Overrides()) -> Any:
    """The profile's ``compress`` section with the CLI's overrides. Epochs and learning
    rate are checked by the profile's own schema (one rule for YAML and flags); a setting
    for a step that does not run is refused rather than silently ignored. The prune ratio
    is checked where pruning starts (``prune.prune``), as before."""
    o = overrides
    prune_ratio, qat = o.prune_ratio, o.qat
    finetune_epochs, finetune_lr, qat_epochs = o.finetune_epochs, o.finetune_lr, o.qat_epochs
    given = {("prune", "finetune_epochs"): finetune_epochs, ("prune", "lr"): finetune_lr,
             ("qat", "epochs"): qat_epochs}
    data = cfg.model_dump()
    for (section, key), value in given.items():
        if value is not None:
            data[section][key] = value
    try:
        cfg = type(cfg).model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"][:2])
        raise UsageError(f"{_FLAGS.get(loc, '.'.join(map(str, loc)))} {given.get(loc)}: "
                         f"{err['msg'][0].lower()}{err['msg'][1:]}",
                         fix="epochs are 0..1000, learning rates > 0") from None
    prune = cfg.prune
    if prune_ratio is not None:
        prune = prune.model_copy(update={"enabled": True, "ratio": prune_ratio,
                                         "macs_reduction": None})
    qat_cfg = cfg.qat if qat is None else cfg.qat.model_copy(update={"enabled": qat})
    if (finetune_epochs is not None or finetune_lr is not None) and not prune.enabled:
        raise UsageError("--finetune-epochs/--finetune-lr set the fine-tune that follows "
                         "pruning, but nothing is pruned",
                         fix="add --prune-ratio R, or use a profile whose compress.prune is "
                             "enabled")
    if qat_epochs is not None and not qat_cfg.enabled:
        raise UsageError("--qat-epochs sets quantization-aware training, which is off",
                         fix="add --qat, or use a profile whose compress.qat is enabled")
    return cfg.model_copy(update={"prune": prune, "qat": qat_cfg})


def _prune_and_finetune(work: nn.Module, example: torch.Tensor, splits: Any, prune_cfg: Any,
                        train: Any, acc_fp32: float, progress: Progress | None,
                        events: Any) -> tuple[nn.Module, dict[str, Any]]:
    """Prune, then fine-tune; returns the model and the manifest's ``prune`` section."""
    from .prune import prune

    t0 = time.perf_counter()
    with _stage(events, "prune", _describe(prune_cfg)):
        res = prune(work, example, prune_cfg, data=(splits.train_x, splits.train_y))
    work = res.model
    acc_pruned = evaluate(work, splits.val_x, splits.val_y)
    _emit(progress, stage="finetune", event="start", epochs=prune_cfg.finetune_epochs)
    with _stage(events, "finetune", f"{prune_cfg.finetune_epochs} epochs"):
        ft = fit(work, splits, epochs=prune_cfg.finetune_epochs, lr=prune_cfg.lr,
                 optimizer=train.optimizer, batch_size=train.batch_size, seed=train.seed,
                 patience=train.patience, progress=_relay(progress, events, "finetune"))
    acc_after = evaluate(work, splits.val_x, splits.val_y)
    _emit(progress, stage="finetune", event="done", accuracy=acc_after)
    return work, {
        **res.report,
        "accuracy_before": acc_fp32, "accuracy_pruned": acc_pruned,
        "accuracy_after": acc_after,
        "finetune": {"epochs": prune_cfg.finetune_epochs, "epochs_run": ft["epochs_run"],
                     "best_epoch": ft["best_epoch"], "lr": prune_cfg.lr,
                     "optimizer": train.optimizer},
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _qat(work: nn.Module, splits: Any, cfg: Any, acc_fp32: float, out_dir: Path,
         progress: Progress | None, events: Any) -> tuple[Path, dict[str, Any]]:
    """NNCF QAT, exported as Q/DQ ONNX; returns its path and the manifest's ``qat`` section."""
    from . import calibration
    from .qat import run_qat

    t0 = time.perf_counter()
    calib = calibration.from_splits(splits, cfg.calibration)
    _emit(progress, stage="qat", event="start", epochs=cfg.qat.epochs)
    with _stage(events, "qat", f"NNCF, {cfg.qat.epochs} epochs, Q/DQ ONNX"):
        q = run_qat(work, splits, calib, cfg.qat, cfg.train, out_dir / "model_qdq.onnx",
                    progress=_relay(progress, events, "qat"))
    _emit(progress, stage="qat", event="done", accuracy=q.report["accuracy_after"])
    return q.onnx_path, {**q.report, "accuracy_fp32": acc_fp32,
                         "seconds": round(time.perf_counter() - t0, 3)}


def run_compress(
    model: nn.Module,
    splits: Any,
    profile: Any,
    out_dir: Path,
    *,
    overrides: Overrides = Overrides(),
    no_budget: bool = False,
    progress: Progress | None = None,
    events: Any = None,
) -> CompressResult:
    """Run the steps ``profile.compress`` enables (``overrides`` from the CLI go over it:
    ``apply_overrides``).

    ``progress`` receives ``{"stage", "event": "start", "epochs"}``, per-epoch
    ``{"stage", "event": "epoch", "epoch", "epochs", "loss", "selection_accuracy", "lr"}``
    (the best epoch is picked on the selection split, ``train.selection_split``) and
    ``{"stage", "event": "done", "accuracy"}`` for stages ``finetune`` and ``qat``.
    ``events`` (a ``pipeline.events.Events``) gets ``stage()`` contexts for prune, finetune
    and qat and ``epoch()`` calls; either or both may be given.
    A step that breaks ``budgets.accuracy_drop`` (unless ``no_budget``) ends the run: the
    result's ``error`` holds the BudgetError and ``section`` the figures up to that step.
    Raises ``UsageError``/``ModelLoadError`` for bad settings or models.
    """
    # longer than 60 lines only through its signature and this docstring: the body is the
    # step order the manifest records (prune -> gate -> save -> QAT -> gate), a call each
    start = time.perf_counter()
    cfg = apply_overrides(profile.compress, overrides)
    budget = profile.budgets.accuracy_drop
    prune_cfg, do_prune, do_qat = cfg.prune, cfg.prune.enabled, cfg.qat.enabled
    if isinstance(model, torch.jit.ScriptModule) and (do_prune or do_qat):
        raise ModelLoadError(
            "a TorchScript model cannot be pruned or quantization-aware trained",
            where=type(model).__name__,
            fix="pass the Python model (file.py:build, or a state dict .pt with --arch)",
        )

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = copy.deepcopy(model).eval()
    example = torch.as_tensor(splits.val_x[:1])
    acc_fp32 = evaluate(work, splits.val_x, splits.val_y)
    section: dict[str, Any] = {
        "accuracy_fp32": acc_fp32,
        "budget": {"accuracy_drop": budget, "enforced": not no_budget},
        "gates": [], "prune": None, "qat": None,
    }
    if do_prune:
        work, section["prune"] = _prune_and_finetune(work, example, splits, prune_cfg, cfg.train,
                                                     acc_fp32, progress, events)
        miss = _gate(section, "prune + fine-tune", acc_fp32, section["prune"]["accuracy_after"],
                     budget, no_budget, _prune_fix(prune_cfg))
        if miss is not None:
            return CompressResult(section=section, model=work, error=miss)

    paths = {"model_pt": save_torchscript(work, example, out_dir / "model.pt"),
             "state_dict": save_state_dict(work, out_dir / "model_state.pt"),
             "onnx": export_onnx(work, example, out_dir / "model.onnx")}

    if do_qat:
        qdq, section["qat"] = _qat(work, splits, cfg, acc_fp32, out_dir, progress, events)
        paths["onnx_qdq"] = qdq
        miss = _gate(section, "QAT INT8 (QDQ ONNX in onnxruntime)", acc_fp32,
                     section["qat"]["accuracy_after"], budget, no_budget, _qat_fix(cfg.qat))
        if miss is not None:
            return CompressResult(section=section, model=work, paths=paths, error=miss)

    section["accuracy_final"] = (section["qat"]["accuracy_after"] if section["qat"]
                                 else evaluate(work, splits.val_x, splits.val_y))
    section["artifacts"] = {
        name: {"path": p.name, "sha256": sha256_path(p), "size_bytes": p.stat().st_size}
        for name, p in paths.items()}
    section["seconds"] = round(time.perf_counter() - start, 3)
    return CompressResult(section=section, model=work, paths=paths)
