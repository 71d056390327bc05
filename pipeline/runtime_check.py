"""Will it run on the device's runtime? Each validated artifact against the profile's
declared release (``runtimes:``), after validation and before publishing.

1. ``prepare``: the isolated environment of every declared release a built format needs,
   found or created before any conversion, so an uninstallable release stops the build
   in seconds (exit 2) with nothing written.
2. ``check_results``: per artifact, the static check (``convert/runtime_compat.py``:
   op versions / opset / spec version against that release) and, with
   ``--verify-runtimes``, the dynamic one (``convert/runtime_run.py``: run there on the
   recorded validation tensors, compared with the host's run).
3. A failure is acted on once where the format has a knob that produces older ops (ONNX:
   the opset converted down to what the release loads, kept only if the host still
   agrees; Core ML: converted again with ``deployment_target``, coremltools'
   ``minimum_deployment_target``, set to the declared release, kept only if it passes);
   otherwise the target fails with the table and the fix. Every target's
   ``runtime_check`` entry goes into the manifest.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith import capture
from edgesmith.artifact import Artifact
from edgesmith.convert import runtime_compat, runtime_env, runtime_run
from edgesmith.errors import EdgesmithError

from . import registry, validate
from .events import Events

ENV_FORMATS = ("tflite", "onnx", "openvino")  # Core ML is checked without an environment
_FIX = {
    "tflite": "declare the release the device really has (profile runtimes.tflite) if it is "
              "newer, or convert with an older onnx2tf/TensorFlow: neither offers an option "
              "that lowers a builtin op's version, which follows from the tensor types used",
    "onnx": "export at an older opset (--opset), or declare the onnxruntime release the "
            "device really has (profile runtimes.onnxruntime)",
    "openvino": "convert with the OpenVINO release the device has, or declare it (profile "
                "runtimes.openvino)",
    "coreml": "convert for the declared release: set the coreml target's options "
              "deployment_target (coremltools' minimum_deployment_target) to it or older, or "
              "declare the release the device really has (profile runtimes.coreml)",
}

_DISAGREES = ("the declared release computes other outputs than the host's run of the same "
              "file: measure on the device (`edgesmith bench`) before shipping it, or declare "
              "the release the device really has")


@dataclass
class Outcome:
    """One target's check: the static and (when asked) dynamic verdicts, and a retry."""

    runtime: str
    static: runtime_compat.StaticCheck
    dynamic: runtime_run.DynamicCheck | None = None
    retried: str = ""

    @property
    def status(self) -> str:
        for part in (self.static, self.dynamic):
            if part is not None and part.status not in ("ok", "not checked"):
                return part.status
        return "ok" if self.static.status == "ok" else self.static.status

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"runtime": self.runtime, "status": self.status,
                             "static": self.static.to_json(),
                             "dynamic": self.dynamic.to_json() if self.dynamic else None}
        if self.retried:
            d["retried"] = self.retried
        return d

    def table(self, name: str) -> str:
        lines = [f"{name} on {self.runtime}: {self.status}"]
        lines += [f"    static: {f.text()}" for f in self.static.findings]
        if self.dynamic is not None and self.dynamic.status != "ok":
            why = self.dynamic.detail.splitlines()[0] if self.dynamic.detail else (
                f"max abs diff {self.dynamic.max_abs_diff} outside {self.dynamic.tolerance}")
            lines.append(f"    dynamic: {self.dynamic.status}: {why}")
        if self.retried:
            lines.append(f"    retried: {self.retried}")
        return "\n".join(lines)


def prepare(profile: Any, targets: list[tuple[Any, Any]], profile_path: Path,
            events: Events) -> dict[str, runtime_env.RuntimeEnv]:
    """{format: env} for each declared release a built format needs (created once)."""
    envs: dict[str, runtime_env.RuntimeEnv] = {}
    wanted = {spec.format.value: runtime_compat.declared(spec.format.value, profile.runtimes)
              for spec, _ in targets if spec.format.value in ENV_FORMATS}
    wanted = {fmt: req for fmt, req in wanted.items() if req}
    if not wanted:
        return envs
    with events.stage("runtimes", "environments of the declared runtime releases"):
        for fmt, req in wanted.items():
            envs[fmt] = runtime_env.ensure(req, where=f"{profile_path}: runtimes",
                                           on_create=events.info)
    return envs


# (spec, options) -> TargetResult: convert and validate one target again (stages.py)
Redo = Callable[[Any, Any], Any]


def check_results(results: list[Any], profile: Any, envs: dict[str, runtime_env.RuntimeEnv],
                  x: np.ndarray, verify: bool, events: Events, *,
                  targets: list[tuple[Any, Any]] | None = None, redo: Redo | None = None
                  ) -> None:
    """Check every validated artifact; a target that fails is marked failed with the table
    (the others are untouched). ``x``: the recorded validation tensors; ``targets`` (the
    resolved (spec, options) pairs) and ``redo`` let a retry convert a target again with
    one option changed (Core ML's deployment target)."""
    todo = [r for r in results if r.status == "ok" and r.artifact is not None
            and runtime_compat.declared(r.spec.format.value, profile.runtimes)]
    if not todo:
        return
    with events.stage("runtime check", "static" + (" + run on the declared releases"
                                                   if verify else " op-version check")):
        options = {spec.name: opts for spec, opts in targets or []}
        for r in todo:
            again = _Again(options.get(r.spec.name), redo)
            _check_result(r, profile, envs, x, verify, events, again)


@dataclass
class _Again:
    """What a retry needs to convert one target again: its options and the converter."""

    options: Any = None
    redo: Redo | None = None


def _check_result(r: Any, profile: Any, envs: dict[str, runtime_env.RuntimeEnv],
                  x: np.ndarray, verify: bool, events: Events, again: _Again) -> None:
    runtime = runtime_compat.declared(r.spec.format.value, profile.runtimes)
    try:
        outcome = _check(r.spec, r.artifact, runtime, envs.get(r.spec.format.value), x, verify)
        if outcome.status not in ("ok", "not checked"):
            outcome = _retry(r, outcome, envs, x, verify, events, again)
    except EdgesmithError as e:  # the release cannot even read the file: this target fails
        r.status, r.message = "failed", f"{r.spec.name}: runtime check: {e.message()}"
        r.runtime_check = {"runtime": runtime, "status": "error", "detail": e.what}
        return
    r.runtime_check = outcome.to_json()
    if outcome.status in ("ok", "not checked"):
        events.info(f"{r.spec.name}: runs on {runtime}"
                    + (" (verified)" if outcome.dynamic else " (static check)"))
        return
    r.status = "failed"
    fix = _DISAGREES if outcome.status == "disagrees" else _FIX.get(r.spec.format.value, "")
    r.message = (f"{r.spec.name}: runtime check failed:\n  {outcome.table(r.spec.name)}"
                 f"\n  fix: {fix}")


def _check(spec: Any, artifact: Artifact, runtime: str, env: runtime_env.RuntimeEnv | None,
           x: np.ndarray, verify: bool) -> Outcome:
    fmt = spec.format.value
    outcome = Outcome(runtime, runtime_compat.check(fmt, artifact.path, runtime, env))
    if verify and env is not None:
        outcome.dynamic = _dynamic(spec, artifact, env, x)
    return outcome


def _dynamic(spec: Any, artifact: Artifact, env: runtime_env.RuntimeEnv,
             x: np.ndarray) -> runtime_run.DynamicCheck:
    target = registry.get(spec.format.value)
    run = target.runner(artifact)
    if run is None or target.device_loader is None:
        return runtime_run.DynamicCheck("not checked", env.requirement,
                                        detail="this host cannot run the format")
    hosts = {"default kernels (validated)": validate.run_batched(run, x)}
    lsb = None
    if spec.format.value == "tflite":
        builtin = runtime_run.tflite_builtin_runner(artifact.path)
        hosts["builtin kernels (no XNNPACK)"] = _to_onnx_layout(builtin(x), hosts)
        if spec.precision.value == "int8":
            lsb = runtime_compat.tflite_output_lsb(artifact.path)
    precision = spec.precision.value
    return runtime_run.check(env, Path(target.device_loader), artifact.path, x, hosts, lsb=lsb,
                             min_cosine=validate.PARITY_MIN_COSINE[precision],
                             max_rel_err=validate.PARITY_MAX_REL_ERR[precision],
                             options=_options(artifact))


def _to_onnx_layout(y: np.ndarray, hosts: dict[str, np.ndarray]) -> np.ndarray:
    """The builtin run's outputs in the validated runner's layout (channels-last outputs
    moved back, as ``convert/tflite.py`` does)."""
    want = next(iter(hosts.values())).shape
    if y.shape != want and y.ndim >= 3 and np.moveaxis(y, -1, 1).shape == want:
        return np.ascontiguousarray(np.moveaxis(y, -1, 1))
    return y


def _options(artifact: Artifact) -> dict[str, Any]:
    return {k: v for k, v in artifact.meta.items() if k in ("graph_optimization",)}


def _retry(r: Any, failed: Outcome, envs: dict[str, runtime_env.RuntimeEnv], x: np.ndarray,
           verify: bool, events: Events, again: _Again) -> Outcome:
    """Once, the format's knob for older ops; the result replaces the artifact only when
    it passes the same checks and the host still computes the same outputs with it."""
    if r.spec.format.value == "coreml":
        return _retry_coreml(r, failed, again, events)
    env = envs.get(r.spec.format.value)
    if r.spec.format.value != "onnx" or env is None:
        return failed
    max_opset, max_ir = runtime_compat.onnx_limits(env)
    older = r.artifact.path.with_name(r.artifact.path.stem + f".opset{max_opset}.onnx")
    why = _older_onnx(r.artifact.path, older, max_opset, max_ir, x)
    if why:
        failed.retried = f"onnx.version_converter to opset {max_opset}: {why}"
        return failed
    candidate = Artifact.of(older, r.artifact.format, r.artifact.precision,
                            **{**r.artifact.meta, "runtime_opset": max_opset})
    again = _check(r.spec, candidate, failed.runtime, env, x, verify)
    again.retried = f"opset converted down to {max_opset} (IR <= {max_ir}) for {failed.runtime}"
    if again.status == "ok":
        os.replace(older, r.artifact.path)
        r.artifact = Artifact.of(r.artifact.path, r.artifact.format, r.artifact.precision,
                                 **candidate.meta)
        events.warn(f"{r.spec.name}: {again.retried}")
        return again
    older.unlink(missing_ok=True)
    failed.retried = again.retried + f", still {again.status}"
    return failed


def _older_onnx(src: Path, dst: Path, opset: int, ir: int, x: np.ndarray) -> str:
    """Write ``src`` converted to ``opset`` / IR ``ir``; "" on success, else why not (the
    converter refused, or the host's onnxruntime computes other outputs with it)."""
    import onnx
    import onnxruntime as ort
    from onnx import version_converter

    try:
        model = version_converter.convert_version(onnx.load(str(src)), opset)
        model.ir_version = min(model.ir_version, ir)
        onnx.save(model, str(dst))
        outs = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
                for p in (src, dst)]
        a, b = (s.run(None, {s.get_inputs()[0].name: x})[0] for s in outs)
    except Exception as e:  # the converter's or onnxruntime's refusal, verbatim
        dst.unlink(missing_ok=True)
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    if not np.allclose(a, b, rtol=1e-4, atol=1e-5):
        dst.unlink(missing_ok=True)
        return "the converted model computes other outputs on the host"
    return ""


def _retry_coreml(r: Any, failed: Outcome, again: _Again, events: Events) -> Outcome:
    """The target converted again with ``deployment_target`` = the declared release (the
    spec version follows from it). The first artifact is kept aside and put back unless
    the new one converts, validates and passes the static check."""
    if again.redo is None or again.options is None or not failed.static.findings:
        return failed
    what = f"converted again with deployment_target {failed.runtime} " \
           "(coremltools minimum_deployment_target)"
    try:
        options = type(again.options).model_validate(
            {**again.options.model_dump(), "deployment_target": failed.runtime})
    except ValueError as e:  # pydantic: a release the option does not take, w8a8 pre-iOS17
        msg = e.errors()[0]["msg"] if hasattr(e, "errors") else str(e)
        failed.retried = f"{what}: not possible: {msg[:200]}"
        return failed
    out_dir = r.artifact.path.parent
    kept = out_dir.with_name(f".{out_dir.name}.before-retry")
    shutil.rmtree(kept, ignore_errors=True)
    os.rename(out_dir, kept)
    with capture.to_log(out_dir.parent.parent / "logs" / f"{r.spec.name}.log"):
        new = again.redo(r.spec, options)  # converters' prints to the target's log
    outcome = _check(r.spec, new.artifact, failed.runtime, None, np.empty(0), False) \
        if new.status == "ok" else None
    if outcome is not None and outcome.status == "ok":
        shutil.rmtree(kept)
        spec_version = new.artifact.meta.get("spec", {}).get("spec_version")
        outcome.retried = f"{what}: spec {spec_version}"
        r.artifact, r.validation = new.artifact, new.validation
        events.warn(f"{r.spec.name}: {outcome.retried}")
        return outcome
    _put_back(out_dir, kept, new)
    why = (new.message.split(": ", 1)[-1] if outcome is None else
           "still " + "; ".join(f.text() for f in outcome.static.findings))
    failed.retried = f"{what}: {why}"[:400]
    return failed


def _put_back(out_dir: Path, kept: Path, new: Any) -> None:
    """The first artifact back where it was; whatever the retry wrote removed."""
    shutil.rmtree(out_dir, ignore_errors=True)
    if new.status == "rejected" and new.artifact is not None:  # moved to rejected/<name>
        shutil.rmtree(out_dir.parent.parent / "rejected" / out_dir.name, ignore_errors=True)
    os.rename(kept, out_dir)
