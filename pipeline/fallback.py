"""Accuracy-aware INT8 fallback: keep the layers that break the budget in float.

When an INT8 target misses ``budgets.accuracy_drop`` (whether or not validation also
rejects its outputs; a parity rejection within the budget is left alone, it is not an
accuracy loss this can buy back), a few layers are usually to blame: one whose input carries a
handful of huge channels, so one per-tensor scale rounds every other channel away. This
module finds them and keeps them in float, one more at a time, until the budget holds:

0. calibrate: a min/max calibration whose ranges a few outliers set rounds every other
   value coarsely, in every layer at once: no handful of layers is to blame (EfficientNet-B0
   on shapes32: per-layer SQNRs all 20-35 dB, cosine 0.90). So the static QDQ model is
   calibrated again with percentile ranges (``ALT_METHOD``), screened with onnxruntime,
   and kept for the formats that lower the static QDQ (ONNX, C) when its drop is lower;
   the layer search below then starts from it, with zero layers in float as its first try;
1. rank: every quantized node of the static QDQ model by its own SQNR
   (``sensitivity.rank_layers``: a cheap proxy, ~two forward passes on the calibration
   samples), most harmful first, grouped into units that fall back together
   (``sensitivity.fallback_units``: a Sigmoid and the Mul it gates, as in a
   squeeze-and-excitation block or a SiLU, since either alone in float still rounds the
   gate's output);
2. screen: quantize again with the top units excluded (onnxruntime's
   ``nodes_to_exclude``) and validate each QDQ model with onnxruntime, bisecting the
   count (``screened``: ~log2 of the cap tries, not one per count) for the smallest that
   is within the budget;
3. per target: convert with those layers in float (the static QDQ for formats that lower
   it, the ``float_nodes`` option for formats that quantize themselves: OpenVINO's nncf
   ``ignored_scope``, TFLite's ``denylisted_nodes``) and validate; while it still misses,
   the count is bisected between the screen's and the cap (``MAX_FRACTION`` of the
   quantized layers), as the screen bisects it.

It runs only for a target that missed: a build within budget pays nothing. The result
carries ``fallback`` (layers, drop before/after, tries) into the manifest and report.
"""

from __future__ import annotations

import math
import shutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from edgesmith import capture, outdir
from edgesmith.artifact import Artifact
from edgesmith.convert.onnx_qdq import quantize_qdq
from edgesmith.convert.optimize import ort_session, run_ort

from . import registry, stages, validate
from .events import Events
from .sensitivity import LayerScore, fallback_units, rank_layers, ranked_units

MAX_FRACTION = 0.2  # at most this share of the quantized layers is kept in float
RANK_SAMPLES = 256  # calibration samples the per-layer SQNR is measured on
OPTION = "float_nodes"  # the Options field of a format that quantizes by itself
ALT_METHOD = "percentile"  # the calibration tried when min/max ranges miss the budget


@dataclass(frozen=True)
class Setup:
    """What the fallback works from, fixed for one build: the files every INT8 target
    shares, the figures it is judged against, and where it writes."""

    fp32_onnx: Path
    calib: Any  # CalibrationSet
    static_qdq: Path | None
    splits: Any  # data.Splits
    reference: stages.Reference
    budget_pt: float | None
    root: Path
    work_dir: Path
    events: Events
    enabled: bool = True
    use_cache: bool = True
    max_batch: int | None = None
    published: Path | None = None  # --out, for paths in messages


@dataclass
class Fallback:
    """One per build: the ranking and the QDQ variants every INT8 target shares."""

    setup: Setup
    _ranking: list[LayerScore] | None = None
    _units: list[tuple[str, ...]] | None = None  # the ranking as what falls back together
    _variants: dict[int, Path] = field(default_factory=dict)
    _screen: tuple[int, list[dict[str, Any]]] | None = None
    _calib: Any = None  # the CalibrationSet the variants use (``calibration``)
    _calib_steps: list[dict[str, Any]] = field(default_factory=list)
    _calib_qdq: dict[str, Path] = field(default_factory=dict)  # method -> its QDQ model
    _own_ranges: dict[str, dict[str, Any]] = field(default_factory=dict)  # target -> its try

    # -- when ---------------------------------------------------------------------------
    def reason(self, r: stages.TargetResult) -> str | None:
        """Why ``r`` needs the fallback (the miss), or None when it does not."""
        v, budget = r.validation, self.setup.budget_pt
        if not self.setup.enabled or budget is None or r.spec.precision.value != "int8" \
                or v is None or not v.ran or v.accuracy_drop is None \
                or r.status not in ("ok", "rejected") or v.accuracy_drop <= budget:
            return None  # a parity rejection within the accuracy budget is not its job
        why = f"accuracy drop {v.accuracy_drop:.2f} pt > budget {self.setup.budget_pt:g} pt"
        if r.status == "rejected":
            why += f" and output parity off ({v.parity_problem('int8')})"
        return why

    def apply(self, r: stages.TargetResult, options: Any,
              ctx_args: dict[str, Any]) -> stages.TargetResult:
        """``r`` itself when no fallback is needed or possible; else the best result the
        fallback reached, with ``fallback`` set either way it ran."""
        why = self.reason(r)
        if why is None:
            return r
        target = registry.get(r.spec.format.value)
        how = _route(target, options, ctx_args)
        if how is None:
            return r
        name = r.spec.name
        root = self.setup.root
        with self.setup.events.stage(f"fallback {name}", f"{why}: keep layers in float") as st, \
                capture.to_log(root / "logs" / f"{name}.log",
                               published=(root, self.setup.published or root)):
            try:
                out = self._search(r, options, ctx_args, how)
            except Exception as e:  # the plain result stands: a fallback fault is no reason
                outdir.raise_if_disk_fault(e, self.setup.root)  # to lose the target's figures
                out = self._crashed(r, e)
            if out.status != "ok":
                st.fail()
        return out

    def _crashed(self, r: stages.TargetResult, e: Exception) -> stages.TargetResult:
        with (self.setup.root / "logs" / f"{r.spec.name}.log").open("a", encoding="utf-8") as f:
            f.write(f"--- fallback failed:\n{traceback.format_exc()}")
        first = str(e).splitlines()[0][:200] if str(e) else ""
        return _annotated(r, None, f"fallback failed: {type(e).__name__}: {first} (full "
                                   f"log: logs/{r.spec.name}.log)")

    # -- shared across targets ----------------------------------------------------------
    def calibration(self) -> Any:
        """The calibration every QDQ variant uses: the profile's, or ``ALT_METHOD`` when
        the profile's is min/max and the percentile-calibrated QDQ model's onnxruntime
        drop is lower (a cause-level fix that keeps every layer in INT8)."""
        if self._calib is None:
            own = self.setup.calib
            self._calib = own
            if own.method == "minmax":
                alt = replace(own, method=ALT_METHOD)
                steps = [self._screen_calibration(own), self._screen_calibration(alt)]
                self._calib_steps = [s for s, _ in steps]
                if _drop_of(steps[1][1]) < _drop_of(steps[0][1]):
                    self._calib = alt
        return self._calib

    def recalibrated(self) -> bool:
        return self.calibration() is not self.setup.calib

    def _recalibrates(self, r: stages.TargetResult) -> bool:
        """Whether ``r`` was converted with a changed calibration: the formats that lower
        the static QDQ model take the screened one; a format with its own non-min/max
        ranges (OpenVINO) kept them when its own try was better; TFLite has min/max only."""
        if r.spec.name in self._own_ranges:
            return bool(self._own_ranges[r.spec.name].get("kept"))
        return self.recalibrated() and getattr(registry.get(r.spec.format.value),
                                               "uses_static_qdq", False)

    def _own_alt_calibration(self, r: stages.TargetResult) -> Any:
        """``ALT_METHOD`` for a format that calibrates itself and has ranges beyond min/max
        (its ``range_methods``), when the profile asked for min/max; else None."""
        own = self.setup.calib
        methods = getattr(registry.get(r.spec.format.value), "range_methods", ())
        return replace(own, method=ALT_METHOD) if own.method == "minmax" and \
            ALT_METHOD in methods else None

    def _screen_calibration(self, calib: Any) -> tuple[dict[str, Any], validate.Validation]:
        if calib is self.setup.calib and self.setup.static_qdq is not None:
            qdq = self.setup.static_qdq
        else:
            qdq = self.setup.work_dir / "fallback" / f"model_qdq_{calib.method}.onnx"
            quantize_qdq(self.setup.fp32_onnx, calib, qdq)
        v = self._validate_qdq(qdq)
        self._calib_qdq[calib.method] = qdq
        return {"method": calib.method, "percentile": calib.percentile if
                calib.method == "percentile" else None, "drop_pt": v.accuracy_drop,
                "cosine": None if v.cosine is None else round(v.cosine, 5)}, v

    def ranking(self) -> list[LayerScore]:
        if self._ranking is None:
            qdq = self._variant(0)
            s = self.setup
            self._ranking = rank_layers(s.fp32_onnx, qdq, s.calib.x[:RANK_SAMPLES],
                                        s.max_batch or 32)
        return self._ranking

    def units(self) -> list[tuple[str, ...]]:
        """The ranking grouped into units that fall back together (``sensitivity.
        fallback_units``: a gate and the Mul it scales), most harmful first."""
        if self._units is None:
            self._units = ranked_units(self.ranking(), fallback_units(self.setup.fp32_onnx))
        return self._units

    def cap(self) -> int:
        """How many units may fall back: ``MAX_FRACTION`` of the quantized layers, >= 1."""
        return min(len(self.units()), max(1, math.ceil(MAX_FRACTION * len(self.ranking())))) \
            if self.ranking() else 0

    def layers(self, k: int) -> list[str]:
        """The nodes of the ``k`` most harmful units."""
        return [node for unit in self.units()[:k] for node in unit]

    def _variant(self, k: int) -> Path:
        """The static QDQ model with the ``k`` most sensitive units left in float."""
        if k not in self._variants:
            calib = self.calibration()
            known = self._calib_qdq.get(calib.method) or (
                None if self.recalibrated() else self.setup.static_qdq)
            if k == 0 and known is not None:
                self._variants[0] = known
                return known
            out = self.setup.work_dir / "fallback" / f"model_qdq_float{k}.onnx"
            quantize_qdq(self.setup.fp32_onnx, calib, out,
                         exclude=self.layers(k) if k else ())
            self._variants[k] = out
        return self._variants[k]

    def screened(self) -> tuple[int, list[dict[str, Any]]]:
        """(the fewest units whose exclusion brings the onnxruntime QDQ model within the
        budget, or the cap when none does; each count's figures). Each count costs one
        calibration and one validation (~1 min on EfficientNet-B0), so the counts are
        bisected rather than walked: the smallest count first (often enough), then the cap
        (when it misses, none is tried in between), then halving the interval between
        the largest count that missed and the smallest that met. This takes more layers
        in float being no worse, which holds for the ranked order but is not proven; the
        per-target search confirms the count on the target itself."""
        if self._screen is None:
            steps: list[dict[str, Any]] = []
            lo = 0 if self.recalibrated() else 1
            found = smallest_meeting(lo, self.cap(), lambda k: self._screens(k, steps))
            self._screen = (self.cap() if found is None else found, steps)
        return self._screen

    def _screens(self, k: int, steps: list[dict[str, Any]]) -> bool:
        """Whether the QDQ model with ``k`` units in float meets the budget; its figures
        are appended to ``steps``."""
        v = self._validate_qdq(self._variant(k))
        steps.append({"layers": k, "drop_pt": v.accuracy_drop,
                      "cosine": None if v.cosine is None else round(v.cosine, 5)})
        return _within(v, self.setup.budget_pt)

    def _validate_qdq(self, qdq: Path) -> validate.Validation:
        sess = ort_session(qdq)
        batch = self.setup.max_batch or validate.BATCH
        ref = self.setup.reference  # judged as stages.convert_and_validate judges a target
        return validate.validate(lambda x: run_ort(sess, x, batch), self.setup.splits.val_x,
                                 self.setup.splits.val_y, ref.outputs, ref.accuracy,
                                 measure_latency=False, batch=batch,
                                 reference_correct=ref.correct, metric=ref.metric,
                                 metric_against=ref.drop_outputs,
                                 metric_reference=ref.metric_value,
                                 parity_view=ref.parity_view)

    # -- per target ---------------------------------------------------------------------
    def _search(self, r: stages.TargetResult, options: Any, ctx_args: dict[str, Any],
                how: str) -> stages.TargetResult:
        if not self.ranking():
            return _annotated(r, self._record(r, None, [], 0), "no quantized layer to rank")
        tried = 0
        best: stages.TargetResult | None = None
        if how != "static_qdq":  # its own ranges first: the layer screen costs a QDQ per count
            alt = self._own_alt_calibration(r)
            if alt is not None:
                tried, got = 1, self._try(r, options, {**ctx_args, "calib": alt}, how, 0)
                self._own_ranges[r.spec.name] = {"runtime": r.spec.name, "method": alt.method,
                                                  "drop_pt": _drop_or_none(got)}
                if _drop(got) < _drop(r):
                    ctx_args, best = {**ctx_args, "calib": alt}, got
                    self._own_ranges[r.spec.name]["kept"] = True
                if got.status == "ok" and _within(got.validation, self.setup.budget_pt):
                    return self._adopt(r, got, 0, tried)
        start, _ = self.screened()
        if how != "static_qdq":  # formats that calibrate themselves: zero layers = plain
            start = max(start, 1)
        tries: dict[int, stages.TargetResult] = {}

        def meets(k: int) -> bool:  # one conversion + validation of the target per count
            got = tries[k] = self._try(r, options, ctx_args, how, k)
            return got.status == "ok" and _within(got.validation, self.setup.budget_pt)

        found = smallest_meeting(start, self.cap(), meets)  # the screen's count first
        tried += len(tries)
        if found is not None:
            return self._adopt(r, tries[found], found, tried)
        for got in tries.values():
            if got.validation is not None and got.validation.ran and (
                    best is None or _drop(got) < _drop(best)):
                best = got
        record = self._record(r, best, self.layers(self.cap()), tried)
        most = len(self.layers(self.cap()))
        return _annotated(r, record, f"fallback kept up to {most} layer(s) in float "
                                     f"in {tried} tr{'y' if tried == 1 else 'ies'}; best "
                                     f"drop {record['drop_after_pt']} pt")

    def _try(self, r: stages.TargetResult, options: Any, ctx_args: dict[str, Any],
             how: str, k: int) -> stages.TargetResult:
        """Convert and validate ``r``'s target with the top ``k`` layers in float, in a
        scratch build folder; its log is appended to the target's own."""
        args, opts = dict(ctx_args), options
        if how == "static_qdq":
            args["static_qdq"] = self._variant(k)
        else:
            opts = options.model_copy(update={OPTION: self.layers(k)})
        scratch = self._scratch(r.spec.name, k)
        s = self.setup
        got = stages.convert_and_validate(r.spec, opts, args, s.splits, s.reference,
                                          scratch, s.use_cache, s.max_batch)
        log = scratch / "logs" / f"{r.spec.name}.log"
        if log.is_file():
            with (self.setup.root / "logs" / f"{r.spec.name}.log").open("a", encoding="utf-8") as f:
                f.write(f"--- fallback: {len(self.layers(k))} layer(s) in float: "
                        f"{self.layers(k)}\n")
                f.write(log.read_text(encoding="utf-8", errors="replace"))
        self.setup.events.info(f"{r.spec.name}: {len(self.layers(k))} layer(s) in float: "
                               f"{_drop_text(got)} ({got.status})")
        return got

    def _scratch(self, name: str, k: int) -> Path:
        return self.setup.work_dir / "fallback" / f"{name}-{k}"

    def _adopt(self, r: stages.TargetResult, got: stages.TargetResult, k: int,
               tried: int) -> stages.TargetResult:
        """The passing try's artifact replaces the plain INT8 one in the build folder."""
        name = r.spec.name
        final = self.setup.root / "targets" / name
        for old in (final, self.setup.root / "rejected" / name):
            if old.exists():
                shutil.rmtree(old)
        rejected = self.setup.root / "rejected"
        if rejected.is_dir() and not any(rejected.iterdir()):
            rejected.rmdir()
        src = self._scratch(name, k) / "targets" / name  # where convert_and_validate put it
        shutil.move(str(src), str(final))
        art = got.artifact
        meta = {**art.meta, "float_nodes": self.layers(k)}
        calibrated = self._recalibrates(r)
        if calibrated and r.spec.name not in self._own_ranges:  # its meta has the profile's
            meta["calibration"] = self.calibration().summary()
        artifact = Artifact(final / art.path.relative_to(src), art.format, art.precision,
                            art.sha256, meta)
        record = self._record(r, got, self.layers(k), tried)
        how = f"{len(self.layers(k))} layer(s) kept in float ({', '.join(self.layers(k))})" \
            if k else \
            "no layer kept in float"
        if calibrated:
            how = f"{ALT_METHOD} calibration, {how}"
        msg = (f"{name}: INT8 drop {_pt(r)} pt missed the {self.setup.budget_pt:g} pt budget; "
               f"{how}: drop {_pt(got)} pt")
        return stages.TargetResult(r.spec, artifact, got.validation, "ok", msg,
                                   fallback=record)

    def _record(self, r: stages.TargetResult, got: stages.TargetResult | None,
                layers: list[str], tried: int) -> dict[str, Any]:
        """The manifest's ``fallback`` of one target."""
        start, steps = self._screen or (0, [])  # not run when own ranges sufficed
        applied = got is not None and got.status == "ok" and _within(got.validation,
                                                                      self.setup.budget_pt)
        return {
            "applied": applied, "layers": layers if applied else [],
            "tried_layers": layers, "budget_pt": self.setup.budget_pt,
            "drop_before_pt": r.validation.accuracy_drop if r.validation else None,
            "drop_after_pt": _drop(got) if got is not None and got.validation else None,
            "tried": tried, "cap": self.cap(),
            "screen": {"runtime": "onnxruntime", "layers": start, "steps": steps},
            "calibration": {"method": ALT_METHOD if self._recalibrates(r)
                            else self.setup.calib.method, "screen": self._calib_steps +
                            [v for k, v in self._own_ranges.items() if k == r.spec.name]}
            if self._calib_steps or r.spec.name in self._own_ranges else None,
            "ranking": [s.to_json() for s in self.ranking()[:max(self.cap(), 5)]],
        }


def smallest_meeting(lo: int, hi: int, meets: Callable[[int], bool]) -> int | None:
    """The smallest count in ``lo..hi`` that ``meets`` the budget, or None when ``hi``
    does not, asking ``meets`` ~log2(hi - lo) + 2 times: ``lo`` first (often enough),
    then ``hi`` (when it misses, nothing between is tried), then bisecting between the
    largest count known to miss and the smallest known to meet. Exact when meeting is
    monotone in the count (more units in float is no worse)."""
    if lo > hi:
        return None
    if meets(lo):
        return lo
    if hi == lo or not meets(hi):
        return None
    while hi - lo > 1:  # lo misses, hi meets
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _route(target: Any, options: Any, ctx_args: dict[str, Any]) -> str | None:
    """How a format takes layers in float: through the static QDQ model it lowers, or
    through its own ``float_nodes`` option; None when it has neither or starts from a
    QAT model (whose learned scales the fallback does not re-derive)."""
    if ctx_args.get("qdq_onnx") is not None:
        return None
    if getattr(target, "uses_static_qdq", False):
        return "static_qdq"
    if OPTION in type(options).model_fields:
        return "option"
    return None


def _within(v: validate.Validation | None, budget_pt: float | None) -> bool:
    return (v is not None and v.ran and v.accuracy_drop is not None
            and budget_pt is not None and v.parity_ok("int8") and v.accuracy_drop <= budget_pt)


def _drop_of(v: validate.Validation) -> float:
    return math.inf if v.accuracy_drop is None else v.accuracy_drop


def _drop_or_none(r: stages.TargetResult) -> float | None:
    return None if math.isinf(_drop(r)) else _drop(r)


def _drop(r: stages.TargetResult) -> float:
    v = r.validation
    return math.inf if v is None or v.accuracy_drop is None else v.accuracy_drop


def _pt(r: stages.TargetResult) -> str:
    return "?" if math.isinf(_drop(r)) else f"{_drop(r):.2f}"


def _drop_text(r: stages.TargetResult) -> str:
    v = r.validation
    if v is None or v.accuracy_drop is None:
        return r.message or "no figures"
    return f"drop {v.accuracy_drop:.2f} pt, cosine {v.cosine:.4f}"


def _annotated(r: stages.TargetResult, record: dict[str, Any] | None,
               note: str) -> stages.TargetResult:
    return replace(r, message=f"{r.message}; {note}" if r.message else f"{r.spec.name}: {note}",
                   fallback=record)


__all__ = ["Fallback", "Setup"]
