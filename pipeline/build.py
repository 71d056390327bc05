"""``edgesmith build``: load -> (compress) -> export -> optimize -> compat -> targets -> package.

Everything is written into a staging folder and published in one swap at the end, so the
previous good build survives any failure before that point.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgesmith import __version__, capture, outdir
from edgesmith.artifact import sha256_path, write_json_atomic
from edgesmith.compress.calibration import CalibrationSet, from_splits
from edgesmith.convert import compat, export, optimize
from edgesmith.errors import BudgetError, EdgesmithError, UsageError
from edgesmith.profiles import load as load_profile
from edgesmith.profiles import resolve_path
from edgesmith.profiles.schema import Profile, TargetSpec
from edgesmith.versions import tool_versions

from . import data as data_mod
from . import fallback, metrics, preprocess_spec, report, runtime_check, stages, validate
from . import model as model_mod
from .events import Events, StageOutcome


@dataclass
class BuildRequest:
    model: str
    data: str
    profile: str
    out: Path
    arch: str | None = None
    trust_pickle: bool = False
    targets: list[str] = field(default_factory=list)  # FORMAT[:PRECISION] filter
    no_budget: bool = False
    compress: bool | None = None  # None: as the profile says
    prune_ratio: float | None = None
    qat: bool | None = None
    finetune_epochs: int | None = None  # these three override the profile's compress section
    finetune_lr: float | None = None
    qat_epochs: int | None = None
    seed: int = 0
    use_cache: bool = True  # --force turns it off
    split: data_mod.SplitRule = field(default_factory=data_mod.SplitRule)  # --val-*
    skip_unsupported: bool = False  # build the targets that can express every node
    opset: int | None = None  # --opset; None: 17, or the newer one an op needs
    no_fallback: bool = False  # --no-fallback: no INT8 layer goes back to float
    verify_runtimes: bool = False  # --verify-runtimes: run each artifact on the declared release
    preprocess: str | None = None  # --preprocess KEY=VALUE,... or a YAML file
    task: str = "classify"  # --task: picks the default metric
    metric: str | None = None  # --metric NAME or file.py:callable


def _input_hashes(req: BuildRequest, profile_path: Path, splits) -> dict[str, str]:
    hashes = {"data": splits.sha256, "profile": sha256_path(profile_path)}
    model_file = Path(req.model.rpartition(":")[0] if ":" in req.model else req.model)
    if model_file.is_file():
        hashes["model"] = sha256_path(model_file)
    if req.arch and Path(req.arch.rpartition(":")[0]).is_file():
        hashes["arch"] = sha256_path(Path(req.arch.rpartition(":")[0]))
    return hashes


@dataclass
class Inputs:
    """What the build reads, loaded and checked before any output folder is touched."""

    profile_path: Path
    profile: Profile
    targets: list[tuple[TargetSpec, Any]]  # (spec, the format's validated Options)
    loaded: model_mod.LoadedModel
    splits: data_mod.Splits
    reference: stages.Reference


@dataclass
class Compressed:
    """The compress stage's products, when it ran."""

    model: Any  # the compressed FP32 torch module
    onnx: Path  # its FP32 ONNX export (dynamic batch), made once by compress/
    torchscript: Path  # its TorchScript trace, made once by compress/
    qdq_onnx: Path | None  # the QAT model with Q/DQ pairs
    section: dict[str, Any]  # the manifest's "compress" section
    reference: stages.Reference  # parity is judged against the compressed model
    accuracy: float  # the compressed FP32 model's own top-1 on the val split


@dataclass
class Exported:
    """The optimised FP32 ONNX every target starts from, and its op-compat report."""

    optimized: Any  # convert.optimize.Optimized
    torchscript: Path | None
    compat: Any  # convert.compat.Report
    skipped: list[str] = field(default_factory=list)  # --skip-unsupported: not built
    opset: int = 0  # the default-domain opset of the FP32 ONNX (exported, or as given)


@dataclass
class BuildOutcome:
    """A published build: its manifest, and the error that makes the CLI exit non-zero
    (failed or rejected targets, budget misses) when there is one. Errors before
    publishing are raised; these come back with the manifest the user must still see."""

    manifest: dict[str, Any]
    error: EdgesmithError | None = None


class _Timed(Events):
    """The caller's events, with each stage's wall time noted for the manifest's
    ``timings``: where a build's minutes go (a converter, the fine-tune, validation)."""

    def __init__(self, inner: Events):
        self.inner = inner
        self.timings: list[dict[str, Any]] = []

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[StageOutcome]:
        t0 = time.perf_counter()
        try:
            with self.inner.stage(name, detail) as outcome:
                yield outcome
        finally:
            self.timings.append({"stage": name, "seconds": round(time.perf_counter() - t0, 3)})

    def info(self, message: str) -> None:
        self.inner.info(message)

    def warn(self, message: str) -> None:
        self.inner.warn(message)

    def epoch(self, stage: str, epoch: int, total: int, **figures: float) -> None:
        self.inner.epoch(stage, epoch, total, **figures)


def _model_bytes(loaded: model_mod.LoadedModel) -> int:
    """The FP32 weights' size, which the free-space check scales per target."""
    if loaded.torch_model is not None:
        return sum(t.numel() * t.element_size() for t in loaded.torch_model.state_dict().values())
    return loaded.onnx_path.stat().st_size if loaded.onnx_path else 0


def _load(req: BuildRequest, events: Events) -> Inputs:
    with events.stage("load", "profile, model, data"):
        profile_path = resolve_path(req.profile)
        profile = load_profile(profile_path)
        _check_overrides(req, profile)
        targets = stages.resolve_targets(profile, req.targets, str(profile_path))
        loaded = model_mod.load(req.model, arch=req.arch, trust_pickle=req.trust_pickle)
        export.check_opset(req.opset, None if loaded.torch_model is not None else loaded.ref)
        pre_spec, profile = preprocess_spec.for_build(req.preprocess, profile)
        metric = metrics.primary(req.task, req.metric)
        _check_task_compress(req, profile, loaded, str(profile_path))
        splits = data_mod.load(req.data, seed=req.seed, rule=req.split, preprocess=pre_spec,
                               preprocess_from_cli=req.preprocess is not None, task=req.task)
        metric = metrics.for_input(metric, splits.val_x.shape[2:])  # mAP decodes at its strides
        loaded = stages.fit_batch(loaded, splits)
        ref = stages.reference(loaded, splits, metric)
    if loaded.batch.mode != "dynamic":
        events.info(f"batch: {loaded.batch.detail}")
    events.info(f"reference ({ref.source}) {_reference_figure(ref, len(splits.val_x))}")
    if ref.correct is not None:  # the flip arithmetic is top-1's; other metrics get a CI
        too_small = validate.resolution_warning(
            validate.resolution(len(splits.val_y), profile.budgets.accuracy_drop))
        if too_small:
            events.warn(too_small)
    return Inputs(profile_path, profile, targets, loaded, splits, ref)


def _reference_figure(ref: stages.Reference, n: int) -> str:
    """"top-1 on N val samples: 97.50% (95% CI ...)", or the primary metric's value in its
    own terms (mAP as a percentage, MSE as a number): a binomial interval is top-1's."""
    if ref.correct is not None:
        lo, hi = ref.accuracy_ci95 or (ref.accuracy, ref.accuracy)
        return (f"top-1 on {n} val samples: {ref.accuracy * 100:.2f}% "
                f"(95% CI {lo * 100:.2f}-{hi * 100:.2f}%)")
    m = ref.metric
    value = f"{ref.accuracy * 100:.2f}%" if m.scale == 100 else f"{ref.accuracy:.6g}"
    return f"{m.name} on {n} val samples: {value}"


def _check_overrides(req: BuildRequest, profile: Profile) -> None:
    """A mistaken --finetune-*/--qat-epochs stops the build before any work. Only then is
    compress/ (and torch with it, ~2-4 s) imported here."""
    if req.finetune_epochs is None and req.finetune_lr is None and req.qat_epochs is None:
        return
    from edgesmith.compress.stage import apply_overrides

    apply_overrides(profile.compress, _overrides(req))


def _overrides(req: BuildRequest) -> Any:
    from edgesmith.compress.stage import Overrides  # deferred: compress/ imports torch

    return Overrides(prune_ratio=req.prune_ratio, qat=req.qat,
                     finetune_epochs=req.finetune_epochs, finetune_lr=req.finetune_lr,
                     qat_epochs=req.qat_epochs)


def _check_task_compress(req: BuildRequest, profile: Profile, loaded: model_mod.LoadedModel,
                         where: str) -> None:
    """Fine-tuning and QAT train with cross-entropy on class ids: on a detector or a
    regressor they would train the wrong loss for minutes, then judge the result with
    another metric. Stop before any work instead, naming the ways out."""
    if _asks_compress(req, profile) and loaded.torch_model is not None \
            and req.task != "classify":
        raise UsageError(
            f"compression (prune + fine-tune, QAT) trains with cross-entropy on class labels; "
            f"this build is --task {req.task}",
            where=where,
            fix="run `edgesmith convert` (no compression) with the same arguments, or turn off "
                "compress.prune.enabled and compress.qat.enabled in the profile; compress the "
                "model with your own training loop first if you need it pruned")


def _asks_compress(req: BuildRequest, profile: Profile) -> bool:
    """--compress/--no-compress when given, else whether the profile or a CLI override
    turns pruning or QAT on."""
    c = profile.compress
    return bool(req.compress if req.compress is not None else (
        c.prune.enabled or c.qat.enabled or req.prune_ratio is not None or bool(req.qat)))


def _wants_compress(req: BuildRequest, inputs: Inputs) -> bool:
    return _asks_compress(req, inputs.profile) and inputs.loaded.torch_model is not None


def _compress(req: BuildRequest, inputs: Inputs, root: Path, work_dir: Path,
              events: Events) -> Compressed:
    """Prune / fine-tune / QAT as the profile (or the CLI) asks. The op-compat report runs
    first on the uncompressed model: pruning and QAT do not change which ops the model
    uses, and minutes of fine-tuning should not precede a "this target cannot express
    node X" that was knowable up front."""
    # compress/ imports torch at module level (~2-4 s): only builds that compress pay it,
    # not `edgesmith --help` or `profiles list`, which import this module too
    from edgesmith.compress.stage import run_compress

    splits = inputs.splits
    with events.stage("compat", "before compressing: every node x every target"):
        pre = export.export_onnx(inputs.loaded.torch_model, splits.spec.batch_shape(1),
                                 work_dir / "precheck.onnx", opset=req.opset)
        compat.check(pre, stages.compat_targets(inputs.targets)).raise_for_unsupported(
            req.skip_unsupported)
    with capture.to_log(root / "logs" / "compress.log"):  # NNCF's progress bars, torch's
        result = run_compress(inputs.loaded.torch_model, splits, inputs.profile,
                              root / "compress", overrides=_overrides(req),
                              no_budget=req.no_budget, events=events)
    if result.error is not None:
        raise result.error  # nothing is published: the build stops at the failing gate
    # accuracy drops stay relative to the original FP32 model, as budgets define them
    compressed = stages.reference(model_mod.LoadedModel(req.model, torch_model=result.model),
                                  splits)
    ref = stages.Reference(compressed.outputs, inputs.reference.accuracy, "torch (compressed)",
                           inputs.reference.correct, inputs.reference.metric,
                           inputs.reference.metric_value, inputs.reference.drop_outputs)
    return Compressed(result.model, result.paths["onnx"], result.paths["model_pt"],
                      result.qdq_onnx, result.section, ref, compressed.accuracy)


def _export(inputs: Inputs, compressed: Compressed | None, root: Path, work_dir: Path,
            events: Events, skip: bool = False, opset: int | None = None) -> Exported:
    """One ONNX export per model version (compress/ already exported the compressed one,
    at the automatic opset: an ``opset`` other than that one exports it again), graph
    optimisation checked against the export, then the op-compat gate (which, with
    ``skip``, names the targets to leave out instead of stopping)."""
    splits = inputs.splits
    asked = f"ONNX opset {opset}" if opset else "ONNX export"
    with events.stage("export", f"{asked} + graph optimisation"):
        if compressed is not None:
            raw, torchscript = compressed.onnx, compressed.torchscript
            if opset is not None and export.exported_opset(raw) != opset:
                raw = export.export_onnx(compressed.model, splits.spec.batch_shape(1),
                                         work_dir / "raw.onnx", opset=opset)
        elif inputs.loaded.torch_model is not None:
            model = inputs.loaded.torch_model
            raw = export.export_onnx(model, splits.spec.batch_shape(1), work_dir / "raw.onnx",
                                     opset=opset)
            torchscript = export.trace_torchscript(model, splits.spec.batch_shape(1),
                                                   work_dir / "model.ts")
        elif inputs.loaded.onnx_bytes is not None:  # the graph with its batch made symbolic
            raw, torchscript = work_dir / "raw.onnx", None
            raw.write_bytes(inputs.loaded.onnx_bytes)
        else:
            raw, torchscript = inputs.loaded.onnx_path, None
        opt = optimize.optimize(raw, root / "model.onnx", splits.val_x,
                                inputs.loaded.batch.max_batch or 256)
        used = export.exported_opset(raw)
    if opset is None and inputs.loaded.torch_model is not None and used != export.DEFAULT_OPSET:
        events.info(f"export: opset {used}, the one the exporter named for an op that opset "
                    f"{export.DEFAULT_OPSET} lacks (--opset chooses)")
    with events.stage("compat", "every node x every target"):
        report_c = compat.check(opt.path, stages.compat_targets(inputs.targets))
        write_json_atomic(root / "compat.json", report_c.to_json())
        skipped = report_c.raise_for_unsupported(skip)
    return Exported(opt, torchscript, report_c, skipped, used)


def _convert_targets(req: BuildRequest, inputs: Inputs, compressed: Compressed | None,
                     exported: Exported, calib: CalibrationSet, root: Path, work_dir: Path,
                     events: Events, envs: dict[str, Any]) -> list[stages.TargetResult]:
    """Every target from the same files: the optimised FP32 ONNX, the QAT model if any,
    and the static QDQ model made once here. No target sees another's result."""
    built = [(spec, options) for spec, options in inputs.targets
             if spec.name not in exported.skipped]
    with events.stage("quantize", "static INT8 QDQ model for the INT8 targets"):
        static_qdq = stages.static_qdq(built, exported.optimized.path, calib, root,
                                       req.use_cache)
    ctx_args = dict(fp32_onnx=exported.optimized.path, spec=inputs.splits.spec, calib=calib,
                    profile=inputs.profile, work_dir=work_dir, torchscript=exported.torchscript,
                    qdq_onnx=compressed.qdq_onnx if compressed else None, static_qdq=static_qdq,
                    torch_model=compressed.model if compressed else inputs.loaded.torch_model)
    ref = compressed.reference if compressed else inputs.reference
    fb = fallback.Fallback(fallback.Setup(
        fp32_onnx=exported.optimized.path, calib=calib, static_qdq=static_qdq,
        splits=inputs.splits, reference=ref, budget_pt=inputs.profile.budgets.accuracy_drop,
        root=root, work_dir=work_dir, events=events, enabled=not req.no_fallback,
        use_cache=req.use_cache, max_batch=inputs.loaded.batch.max_batch, published=req.out))
    results = []
    for spec, options in inputs.targets:
        if spec.name in exported.skipped:
            results.append(stages.skipped(spec, exported.compat.unsupported_nodes(spec.name)))
            events.warn(results[-1].message)
            continue
        # what the converters and runtimes print (absl, oneDNN, XNNPACK) goes to its log
        with events.stage(f"target {spec.name}", "convert + validate") as stage, \
                capture.to_log(root / "logs" / f"{spec.name}.log", published=(root, req.out)):
            r = stages.convert_and_validate(spec, options, ctx_args, inputs.splits, ref, root,
                                            use_cache=req.use_cache,
                                            max_batch=inputs.loaded.batch.max_batch)
            r.message = capture.shown_paths(r.message, root, req.out)
            if r.status in ("failed", "rejected"):
                stage.fail()
        r = fb.apply(r, options, ctx_args)  # an INT8 target over the accuracy budget
        results.append(r)
        cached = " (from cache)" if r.artifact and r.artifact.meta.get("cached") else ""
        events.info((r.message or f"{spec.name}: ok") + cached)

    def redo(spec: Any, options: Any) -> stages.TargetResult:  # a runtime check's retry
        return stages.convert_and_validate(spec, options, ctx_args, inputs.splits, ref, root,
                                           req.use_cache, inputs.loaded.batch.max_batch)
    runtime_check.check_results(results, inputs.profile, envs,
                                inputs.splits.val_x[:stages.BENCH_SAMPLES], req.verify_runtimes,
                                events, targets=inputs.targets, redo=redo)
    return results


def _manifest(req: BuildRequest, inputs: Inputs, compressed: Compressed | None,
              exported: Exported, calib: CalibrationSet, results: list[stages.TargetResult],
              misses: list[str], root: Path, seconds: float,
              timings: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest from typed results: what went in, with which tools, what came out."""
    splits, profile = inputs.splits, inputs.profile
    reference: dict[str, Any] = {"source": inputs.reference.source,
                                 "accuracy": inputs.reference.accuracy,
                                 "accuracy_ci95": _ci(inputs.reference.accuracy_ci95)}
    if compressed is not None:
        # parity is judged against the compressed model (what the converters were given)
        reference.update(parity_against=compressed.reference.source,
                         compressed_accuracy=compressed.accuracy)
    ref = compressed.reference if compressed else inputs.reference
    return {
        "edgesmith_version": __version__,
        "created_unix": int(time.time()),
        "command": " ".join(sys.argv),
        "host": {"machine": platform.machine(), "system": platform.system()},
        "tools": tool_versions(),
        "inputs": {"model": req.model, "arch": req.arch, "data": req.data,
                   "profile": str(inputs.profile_path), "seed": req.seed,
                   "sha256": _input_hashes(req, inputs.profile_path, splits)},
        "profile": profile.model_dump(mode="json"),
        "input": splits.spec.to_json(),
        # several model outputs packed into one (pipeline/packing.py): how to unpack
        "outputs": inputs.loaded.packing.to_json() if inputs.loaded.packing else None,
        "data": splits.summary(),
        "metric": (inputs.reference.metric or metrics.BUILTIN["top1"]).to_json(),
        "reference": reference,
        "validation": validate.resolution(len(splits.val_y), profile.budgets.accuracy_drop),
        "stages": {"export": {"opset": exported.opset, "opset_requested": req.opset,
                              "from": inputs.loaded.kind,
                              "batch": inputs.loaded.batch.to_json()},
                   "optimize": exported.optimized.summary(),
                   "compat": exported.compat.counts(), "calibration": calib.summary()},
        "compress": compressed.section if compressed else None,
        "bench_data": stages.write_bench_data(root, splits, ref),
        "targets": [r.to_json(root) for r in results],
        "budgets": profile.budgets.model_dump(mode="json"),
        "budget_misses": misses,
        "duration_s": round(seconds, 2),
        "timings": timings,  # each stage's wall time, up to here (publishing follows)
    }


def _ci(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else [round(ci[0], 6), round(ci[1], 6)]


def _verdict(req: BuildRequest, results: list[stages.TargetResult],
             misses: list[str]) -> EdgesmithError | None:
    """Why a published build still exits non-zero: failed targets first, then budgets."""
    failed = stages.failure(results)
    if failed is not None:
        return failed
    if misses and not req.no_budget:
        return BudgetError("build outside the profile's budgets:\n  " + "\n  ".join(misses),
                           where=str(req.out),
                           fix="relax budgets (or device.ram_mb) in the profile, or pass "
                               "--no-budget to report")
    return None


def run(req: BuildRequest, events: Events | None = None) -> BuildOutcome:
    """load -> (compress) -> export + optimise -> compat -> calibrate -> targets -> publish.
    Raises EdgesmithError subclasses for anything that stops the build before publishing;
    a published build comes back with its manifest and, if it must fail, its error."""
    events = _Timed(events or Events())
    t_start = time.perf_counter()
    inputs = _load(req, events)
    envs = runtime_check.prepare(inputs.profile, inputs.targets, inputs.profile_path, events)
    need = outdir.estimate_bytes(_model_bytes(inputs.loaded), len(inputs.targets))
    with outdir.staging(req.out, on_wait=events.warn, need_bytes=need) as root, \
            outdir.work_dir(need) as work_dir:
        compressed = (_compress(req, inputs, root, work_dir, events)
                      if _wants_compress(req, inputs) else None)
        exported = _export(inputs, compressed, root, work_dir, events, req.skip_unsupported,
                           req.opset)
        calib = stages.calibration_for(
            from_splits(inputs.splits, inputs.profile.compress.calibration, warn=events.warn),
            inputs.loaded.batch.max_batch)
        results = _convert_targets(req, inputs, compressed, exported, calib, root, work_dir,
                                   events, envs)
        misses = stages.check_budgets(results, inputs.profile.budgets,
                                      inputs.profile.device.ram_mb)
        manifest = _manifest(req, inputs, compressed, exported, calib, results, misses, root,
                             time.perf_counter() - t_start, events.timings)
        # a detector: one validation image with FP32 and INT8 boxes, drawn for the report
        manifest["detection"] = stages.detection_figure(root, inputs.splits,
                                                        inputs.reference, results)
        write_json_atomic(root / "manifest.json", manifest)
        report.write_report(root)
        outdir.publish(root, req.out)
    return BuildOutcome(manifest, _verdict(req, results, misses))


def summary(manifest: dict[str, Any], out: Path) -> dict[str, Any]:
    """The stable ``--json`` document (README "JSON output")."""
    keys = ("name", "format", "precision", "status", "path", "sha256", "size_bytes",
            "accuracy", "reference_accuracy", "accuracy_drop", "parity", "latency_ms_p50",
            "message", "accuracy_ci95", "accuracy_drop_ci95", "unsupported_nodes",
            "fallback")
    return {
        "out": str(out),
        "profile": manifest["profile"]["name"],
        "reference": manifest["reference"],
        "targets": [{k: t.get(k) for k in keys} for t in manifest["targets"]],
        "budget_misses": manifest["budget_misses"],
        "compress": manifest.get("compress"),
        "validation": manifest.get("validation"),
        "duration_s": manifest["duration_s"],
    }


__all__ = ["BuildOutcome", "BuildRequest", "run", "summary"]
