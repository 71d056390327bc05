"""The build's stages as plain functions: each reads files/arrays and writes files.

``build.py`` strings them together; keeping them separate lets ``edgesmith compress``,
``convert`` and ``inspect`` reuse exactly the same steps.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith import __version__, outdir
from edgesmith.artifact import Artifact, sha256_path
from edgesmith.convert.onnx_qdq import quantize_qdq
from edgesmith.errors import (
    ConversionError,
    EdgesmithError,
    ModelLoadError,
    ProfileError,
    UsageError,
)
from edgesmith.inputs import CalibrationSet
from edgesmith.profiles.schema import TargetSpec
from edgesmith.target import ConvertContext, Target
from edgesmith.targets import tiling
from edgesmith.targets.int8_input import arenas_note
from edgesmith.versions import tool_versions

from . import bench_detect, bench_frames, cache, registry, validate
from .data import Splits, check_labels
from .metrics import Metric
from .model import LoadedModel, check_input, pack_outputs
from .model import fit_batch as fit_batch_to
from .report_detect import figure as detection_figure  # noqa: F401 (build.py draws it)

BENCH_SAMPLES = 16


def torch_reference(model: Any, x: np.ndarray) -> np.ndarray:
    """One thread, runs of 32: on MobileNetV2-96 (2 cores shared, load ~17) that took 4.2x
    less CPU and 3.6x less wall time than torch's 2 threads x 256 (threads spin for work).
    Re-measured on 2 cores as other jobs started (load 1 -> 9; random weights, 256 samples,
    runs of 32): 1 thread 4.1-8.4 s wall, 2 threads 38.6-45.1 s. A second thread only pays
    on an idle machine, and a build cannot know it stays idle, so one it is.
    The thread count is put back: later stages (export, training) keep theirs."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            outs = [model(torch.from_numpy(x[i:i + 32])).numpy() for i in range(0, len(x), 32)]
    finally:
        torch.set_num_threads(before)
    return np.concatenate(outs).astype(np.float32)


@dataclass
class Reference:
    """What every artifact is judged against: the FP32 model's outputs on the val split."""

    outputs: np.ndarray
    accuracy: float
    source: str  # torch | onnxruntime (when the user gave an .onnx)
    # per val sample: did the model the drop is measured against get it right? (after
    # compression the outputs are the compressed model's, the drop still the original's)
    correct: np.ndarray | None = None
    # the primary metric (--task/--metric) when not top-1, its value for the model the drop
    # is measured against, and that model's outputs (they pair the bootstrap interval)
    metric: Metric | None = None
    metric_value: float | None = None
    drop_outputs: np.ndarray | None = None
    # how output parity reads the outputs (a detector's: logits as scores); None: as they are
    parity_view: Any = None

    @property
    def accuracy_ci95(self) -> tuple[float, float] | None:
        if self.correct is None:
            return None
        return validate.wilson(int(self.correct.sum()), len(self.correct))


def fit_batch(loaded: LoadedModel, splits: Splits) -> LoadedModel:
    """The model as every later stage takes it, once the data is known to fit its input:
    an ONNX graph that fixes the batch to 1 made to take the build's batches
    (``model.fit_batch``), and several outputs packed into one (``model.pack_outputs``:
    converters, runners and the C target handle one output)."""
    check_input(loaded, splits.spec.batch_shape(2), splits.source)
    x = np.concatenate([splits.val_x[:2], splits.train_x[:2]])
    if loaded.onnx_path is not None:
        loaded = fit_batch_to(loaded, x)
    return pack_outputs(loaded, x)


def reference(loaded: LoadedModel, splits: Splits, metric: Metric | None = None) -> Reference:
    check_input(loaded, splits.spec.batch_shape(2), splits.source)
    if loaded.torch_model is not None:
        out = torch_reference(loaded.torch_model, splits.val_x)
        source = "torch"
    else:
        from edgesmith.convert.optimize import run_ort

        try:
            out = run_ort(loaded.onnx_source, splits.val_x, loaded.batch.max_batch or 256)
        except Exception as e:
            raise ModelLoadError(
                f"onnxruntime cannot run the model on inputs of shape "
                f"{list(splits.spec.batch_shape(1))}: {str(e).splitlines()[0][:300]}",
                where=loaded.ref, fix="check the model's input shape against the data set",
            ) from None
        source = "onnxruntime"
    check_labels(splits, out, loaded.ref)
    value = metric(out, splits.val_y) if metric is not None else None  # a user metric's
    if not validate.is_class_labels(splits.val_y):  # boxes (detection): no top-1; the
        if metric is None:  # metric is all there is, and its value stands for accuracy
            raise UsageError("these labels are not one class per sample, so top-1 cannot "
                             "judge the model", where=splits.source,
                             fix="pass --task detect for a detection folder")
        return Reference(out, value, source, None, metric, value, out,
                         _detection_parity(metric))
    return Reference(out, validate.accuracy(out, splits.val_y), source,  # faults stop here
                     validate.predictions(out) == splits.val_y, metric, value, out)


def _detection_parity(metric: Metric) -> Any:
    """detection.parity_view for a built-in detection metric's build, else None."""
    if metric.source is not None or metric.name not in ("map50", "map50_95"):
        return None
    from .detection import parity_view

    return parity_view


def resolve_targets(profile: Any, only: list[str] | None, where: str) -> list[tuple[Any, Any]]:
    """Profile targets (filtered by ``--target`` FORMAT[:PRECISION]) with validated options."""
    specs = list(profile.targets)
    if only:
        wanted = []
        for item in only:
            fmt, _, prec = item.partition(":")
            hits = [s for s in specs if s.format.value == fmt and (not prec or
                                                                    s.precision.value == prec)]
            if not hits:
                try:
                    hits = [TargetSpec(format=fmt, precision=prec or "fp32")]
                except ValueError:
                    raise UsageError(f"--target {item}: unknown format or precision",
                                     fix="use FORMAT[:PRECISION], e.g. tflite:int8") from None
            wanted += [h for h in hits if h not in wanted]
        specs = wanted
    out = []
    for spec in specs:
        target = registry.get(spec.format.value)
        options = registry.validate_options(target, spec, where)
        out.append((spec, options))
    return out


def compat_targets(targets: list[tuple[Any, Any]]) -> list[tuple[TargetSpec, Target]]:
    """(spec, options) pairs from ``resolve_targets`` as (spec, Target) for ``compat.check``."""
    return [(spec, registry.get(spec.format.value)) for spec, _ in targets]


@dataclass
class TargetResult:
    spec: Any
    artifact: Artifact | None
    validation: validate.Validation | None
    status: str  # ok | failed | rejected | budget | skipped
    message: str = ""
    # skipped (--skip-unsupported): the nodes the target cannot express, with hints
    unsupported: list[dict[str, str]] = field(default_factory=list)
    runtime_check: dict[str, Any] | None = None  # the declared runtime's verdict (runtime_check.py)
    # the accuracy-aware INT8 fallback's record, when it ran (pipeline/fallback.py)
    fallback: dict[str, Any] | None = None
    # failed on the user's input (a target option naming no node, ...): exit 2, not 4
    user_error: bool = False

    def to_json(self, root: Path) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.spec.name, "format": self.spec.format.value,
                             "precision": self.spec.precision.value, "status": self.status}
        if self.message:
            d["message"] = self.message
        if self.unsupported:
            d["unsupported_nodes"] = self.unsupported
        if self.runtime_check is not None:
            d["runtime_check"] = self.runtime_check
        if self.fallback is not None:
            d["fallback"] = self.fallback
        if self.artifact is not None:
            target = registry.get(self.spec.format.value)
            covered = (self.artifact.path.parent if self.artifact.meta.get("sha256_of") ==
                       "folder" else self.artifact.path)
            d.update({
                "path": self.artifact.path.relative_to(root).as_posix(),
                "sha256": self.artifact.sha256,
                "sha256_of": covered.relative_to(root).as_posix(),
                "size_bytes": self.artifact.size_bytes,
                "bench": target.device_bench_spec(self.artifact),
                "meta": {k: v for k, v in self.artifact.meta.items() if k != "size_bytes"},
            })
        if self.validation is not None:
            d.update(self.validation.to_json())
        return d


def skipped(spec: Any, nodes: list[dict[str, str]]) -> TargetResult:
    """A target left out by ``--skip-unsupported``: the nodes it cannot express."""
    shown = "; ".join(f"{n['node']} ({n['op_type']})" for n in nodes[:3])
    more = f" and {len(nodes) - 3} more" if len(nodes) > 3 else ""
    return TargetResult(spec, None, None, "skipped",
                        f"{spec.name}: skipped (--skip-unsupported): cannot express "
                        f"{len(nodes)} node(s): {shown}{more}; see compat.json", nodes)


def _cache_key(target: Target, ctx: ConvertContext) -> str:
    """Everything a conversion reads: input files, settings, calibration data, versions."""
    # the TorchScript file is left out: torch.jit.save is not byte-deterministic, and it is
    # traced from the same module as the ONNX export, whose hash already identifies it
    files = {"fp32_onnx": ctx.fp32_onnx, "qdq_onnx": ctx.qdq_onnx, "static_qdq": ctx.static_qdq}
    return cache.make_key({
        "files": {k: sha256_path(v) for k, v in files.items() if v is not None},
        "target": ctx.target.name, "options": ctx.options.model_dump(mode="json"),
        "calib": [hashlib.sha256(ctx.calib.x.tobytes()).hexdigest(), ctx.calib.summary()],
        "input": ctx.spec.to_json(), "tools": tool_versions(), "edgesmith": __version__,
        "code": cache.code_hash(target),
        # the C target compiles the power: block into model.h (ES_POWER_*)
        "power": ctx.profile.power.model_dump(mode="json") if ctx.profile else None,
        # ... and the preprocess: block into model.h (ES_PREPROCESS_SPEC)
        "preprocess": getattr(ctx.profile, "preprocess", None) and
        ctx.profile.preprocess.model_dump(mode="json"),
    })


def convert_and_validate(spec: Any, options: Any, ctx_args: dict[str, Any], splits: Splits,
                         ref: Reference, root: Path, use_cache: bool = True,
                         max_batch: int | None = None) -> TargetResult:
    """One target: convert, then validate (in runs of at most ``max_batch`` samples when
    the model's graph fixes its batch); a crash is caught and logged, not propagated, so
    the other targets of the profile still complete and are reported."""
    target = registry.get(spec.format.value)
    out_dir = root / "targets" / spec.name
    out_dir.mkdir(parents=True, exist_ok=True)
    ctx = ConvertContext(target=spec, options=options, out_dir=out_dir,
                                  log_path=root / "logs" / f"{spec.name}.log", **ctx_args)
    key = _cache_key(target, ctx) if use_cache else None
    hit = cache.lookup("targets", key, out_dir) if key else None
    try:
        if hit is not None:
            artifact = Artifact(out_dir / hit["artifact"], hit["format"], hit["precision"],
                                hit["sha256"], {**hit["meta"], "cached": True})
        else:
            artifact = target.convert(ctx)
            if key:
                cache.store("targets", key, out_dir, {
                    "artifact": artifact.path.relative_to(out_dir).as_posix(),
                    "format": artifact.format, "precision": artifact.precision,
                    "sha256": artifact.sha256, "meta": artifact.meta})
    except EdgesmithError as e:
        outdir.raise_if_disk_fault(e, root)  # a full/read-only disk: no target's fault
        ctx.log(e.message())
        return TargetResult(spec, None, None, "failed",
                            f"{spec.name}: convert: {e.what} (full log: logs/{spec.name}.log)"
                            + (f"; fix: {e.fix}" if e.fix and _is_user_error(e) else ""),
                            user_error=_is_user_error(e))
    except Exception as e:  # a third-party converter crashed: keep the log, go on
        outdir.raise_if_disk_fault(e, root)
        ctx.log(traceback.format_exc())
        first = str(e).splitlines()[0][:200] if str(e) else ""
        return TargetResult(
            spec, None, None, "failed",
            f"{spec.name}: convert: {type(e).__name__}: {first} (full log: logs/{spec.name}.log)")
    try:
        run = target.runner(artifact)
        own = target.host_latency_ms(artifact, splits.val_x[:1]) if run is not None else None
        v = validate.validate(run, splits.val_x, splits.val_y, ref.outputs, ref.accuracy,
                              not_run_reason=target.not_runnable_reason, latency_ms=own,
                              batch=max_batch or validate.BATCH,
                              reference_correct=ref.correct, metric=ref.metric,
                              metric_against=ref.drop_outputs, metric_reference=ref.metric_value,
                              parity_view=ref.parity_view)
    except Exception as e:
        outdir.raise_if_disk_fault(e, root)
        ctx.log(traceback.format_exc())
        return TargetResult(spec, artifact, None, "failed",
                            f"{spec.name}: validate: {type(e).__name__}: {e}"[:300])
    if not v.parity_ok(spec.precision.value):
        rejected = root / "rejected" / spec.name
        rejected.parent.mkdir(parents=True, exist_ok=True)
        out_dir.rename(rejected)
        artifact = Artifact(rejected / artifact.path.relative_to(out_dir), artifact.format,
                            artifact.precision, artifact.sha256, artifact.meta)
        why = v.parity_problem(spec.precision.value)
        return TargetResult(spec, artifact, v, "rejected",
                            f"{spec.name}: output parity off ({why}); "
                            f"kept in rejected/{spec.name}")
    return TargetResult(spec, artifact, v, "ok")


@dataclass(frozen=True)
class OneSampleCalibration(CalibrationSet):
    """The calibration set of a model that takes one sample per run (a graph fixing its
    batch to 1): every converter's ``batches(n)`` gets batches of one."""

    def batches(self, batch_size: int = 1) -> Iterator[np.ndarray]:
        return super().batches(1)


def calibration_for(calib: CalibrationSet, max_batch: int | None) -> CalibrationSet:
    """``calib`` as the model can take it: one sample per batch when its graph says so."""
    if max_batch != 1:
        return calib
    return OneSampleCalibration(x=calib.x, method=calib.method, percentile=calib.percentile,
                                per_channel=calib.per_channel, requested=calib.requested)


def static_qdq(targets: list[tuple[Any, Any]], fp32_onnx: Path, calib: Any, root: Path,
               use_cache: bool = True) -> Path | None:
    """The FP32 model calibrated into Q/DQ pairs, once per build, for every INT8 target
    that starts from it (onnx-int8 lowers nothing, c-int8 lowers it to integer kernels):
    one calibration, so both judge and ship the same scales whatever the profile's order.
    Written as ``model_qdq.onnx`` beside ``model.onnx``; None when no target needs it."""
    if not any(spec.precision.value == "int8" and registry.get(spec.format.value).uses_static_qdq
               for spec, _ in targets):
        return None
    out = root / "model_qdq.onnx"
    key = cache.make_key({
        "files": {"fp32_onnx": sha256_path(fp32_onnx)},
        "calib": [hashlib.sha256(calib.x.tobytes()).hexdigest(), calib.summary()],
        "tools": tool_versions(), "edgesmith": __version__, "code": cache.code_hash(quantize_qdq),
    }) if use_cache else None
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        if key and cache.lookup("qdq", key, Path(tmp)) is not None:
            os.replace(Path(tmp) / out.name, out)
            return out
        try:
            quantize_qdq(fp32_onnx, calib, Path(tmp) / out.name)
        except EdgesmithError as e:  # onnx writes cut short on a full disk read as corrupt
            outdir.raise_if_disk_fault(e, root)
            raise
        if key:
            cache.store("qdq", key, Path(tmp), {"artifact": out.name})
        os.replace(Path(tmp) / out.name, out)
    return out


def write_bench_data(root: Path, splits: Splits, ref: Reference) -> dict[str, str]:
    """The exact tensors every device feeds, and the outputs they are checked against."""
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    n = min(BENCH_SAMPLES, len(splits.val_x))
    np.save(data / "bench_input.npy", splits.val_x[:n])
    np.save(data / "bench_reference.npy", ref.outputs[:n])
    return {"input": "data/bench_input.npy", "reference": "data/bench_reference.npy",
            **bench_frames.write(data, splits),  # an image folder's raw val frames
            **bench_detect.write(data, ref.outputs[:n], splits.val_y, ref.metric,  # boxes
                                splits.val_x.shape[2:])}


def _ram_problem(artifact: Artifact, ram_mb: int) -> str | None:
    """An artifact whose weights plus activation arena exceed the device's RAM cannot run
    there, whatever the budgets say: the profile's ``device.ram_mb`` is that limit."""
    need = artifact.size_bytes + int(artifact.meta.get("arena_bytes") or 0)
    what = "weights + arena"
    if artifact.meta.get("ram_bytes") is not None:  # an MCU: weights in flash, not RAM
        need, what = int(artifact.meta["ram_bytes"]), "arena + .bss + .data + stack"
    if need <= ram_mb * 1024 * 1024:
        return None
    return f"needs {need / 2**20:.1f} MB ({what}) > device RAM {ram_mb} MB"


def check_budgets(results: list[TargetResult], budgets: Any,
                  ram_mb: int | None = None) -> list[str]:
    """Mark results that break the profile's budgets or the device's RAM; return one line
    per miss."""
    misses = []
    for r in results:
        if r.status != "ok":
            continue
        problems = []
        drop = r.validation.accuracy_drop if r.validation else None
        if budgets.accuracy_drop is not None and drop is not None and drop > budgets.accuracy_drop:
            m = r.validation.metric
            problems.append(f"accuracy drop {drop:.2f} pt > budget {budgets.accuracy_drop} pt"
                            if m is None else f"{m['name']} drop {drop:.4g} {m['unit']} > "
                            f"budget {budgets.accuracy_drop} {m['unit']}")
        flash = r.artifact.meta.get("flash_bytes") if r.artifact else None  # an MCU's C
        kb = (flash if flash is not None else r.artifact.size_bytes) / 1024 if r.artifact \
            else None
        if budgets.model_kb is not None and kb is not None and kb > budgets.model_kb:
            problems.append(f"{'flash' if flash is not None else 'size'} {kb:.1f} KB > "
                            f"budget {budgets.model_kb} KB")
        arena = r.artifact.meta.get("arena_bytes") if r.artifact else None
        if budgets.arena_kb is not None and arena is not None and arena / 1024 > budgets.arena_kb:
            inputs = arenas_note(r.artifact.meta.get("input_arenas"))
            problems.append(f"arena {arena} B ({arena / 1024:.1f} KB) > budget "
                            f"{budgets.arena_kb} KB"
                            + tiling.budget_note(r.artifact.meta.get("tiling"))
                            + (f"; {inputs}" if inputs else ""))
        ram = _ram_problem(r.artifact, ram_mb) if r.artifact and ram_mb else None
        if ram:
            problems.append(ram)
        if problems:
            r.status = "budget"
            r.message = f"{r.spec.name}: " + "; ".join(problems)
            misses.append(r.message)
    return misses


def describe_failure(results: list[TargetResult]) -> str:
    return "\n".join(f"  {r.message}" for r in results if r.status in ("failed", "rejected"))


def _is_user_error(e: EdgesmithError) -> bool:
    """A target's error that the user's input caused (its options, its profile): the fix is
    theirs, so the build exits 2 as for any usage error, not 4 (a conversion fault)."""
    return isinstance(e, (UsageError, ProfileError))


def failure(results: list[TargetResult]) -> EdgesmithError | None:
    """The error a build with failed or rejected targets exits with; None when all ran. A
    target that failed on the user's own input makes it a usage error (exit 2)."""
    bad = [r for r in results if r.status in ("failed", "rejected")]
    if not bad:
        return None
    kind = UsageError if any(r.user_error for r in bad) else ConversionError
    return kind(
        f"{len(bad)} of {len(results)} target(s) failed:\n{describe_failure(results)}",
        fix="see logs/ in the build folder; the other targets are in the manifest",
    )
