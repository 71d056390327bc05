"""The one interface every output format implements: ``Target`` and what it is handed.

A format is one module (``convert/tflite.py``, ``targets/c_target.py``) defining a
``Target`` subclass; subclassing registers it. The pipeline never names a format: it asks
the registry for whatever the profile lists. Modules must import their heavy libraries
(tensorflow, openvino, coremltools) inside methods, so listing targets stays cheap.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from .artifact import Artifact
from .errors import ProfileError
from .inputs import CalibrationSet, InputSpec

if TYPE_CHECKING:  # annotations only: the core imports no room at run time
    from edgesmith.profiles.schema import Profile, TargetSpec

Runner = Callable[[np.ndarray], np.ndarray]


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class CompatRule:
    """How one target handles one ONNX op type."""

    status: str  # supported | lowered | unsupported
    hint: str = ""


@dataclass
class ConvertContext:
    """Everything a converter may read. Files, not live objects (see STYLE.md)."""

    fp32_onnx: Path  # optimized FP32 ONNX with a dynamic batch axis
    spec: InputSpec  # the input's shape, layout and normalisation
    calib: CalibrationSet  # the calibration set every INT8 target shares
    target: TargetSpec  # this target as the profile lists it (format, precision, options)
    options: BaseModel  # the target's validated Options: read options only from here
    profile: Profile | None  # the device profile (None in unit tests of one format)
    out_dir: Path  # empty folder for this target's files
    work_dir: Path  # scratch space, removed after the build
    log_path: Path  # converter output goes here (DIR/logs/<target>.log)
    torchscript: Path | None = None  # traced FP32 model, for converters that start from torch
    # the live FP32 module (eval mode): the one exception to "files, not objects", for
    # converters that must re-prepare the module itself (Core ML W8A8 via LinearQuantizer)
    torch_model: Any = None
    qdq_onnx: Path | None = None  # QAT model exported with Q/DQ pairs, when the profile ran QAT
    # the FP32 model calibrated statically into Q/DQ pairs (onnxruntime.quantization), made
    # once by the pipeline for every INT8 target whose format sets ``uses_static_qdq``
    static_qdq: Path | None = None

    @property
    def precision(self) -> str:
        """fp32 | fp16 | int8: the one way a converter reads what it is asked for."""
        return self.target.precision.value

    def log(self, line: str) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as f:
            f.write(line.rstrip("\n") + "\n")


REGISTRY: dict[str, type[Target]] = {}

# The rooms whose modules define formats, named here once (by name, not imported: they
# sit above the core) so the pipeline and the device bench find formats the same way.
FORMAT_ROOMS = ("edgesmith.convert", "edgesmith.targets")


def discover() -> dict[str, type[Target]]:
    """Every registered format: importing a format room's modules registers them."""
    for room in FORMAT_ROOMS:
        package = importlib.import_module(room)
        for info in pkgutil.iter_modules(package.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{room}.{info.name}")
    return REGISTRY


def options_error(target: Target, e: ValidationError, where: str,
                  context: str = "") -> ProfileError:
    """A format's Options rejected a profile entry: name the key, what was wrong, what
    was given and every option the format has."""
    err = e.errors()[0]
    key = ".".join(str(p) for p in err["loc"])
    known = ", ".join(target.Options.model_fields) or "(none)"
    return ProfileError(f"{context}{target.format} option {key}: {err['msg']} "
                        f"(got {err.get('input')!r})", where=where,
                        fix=f"options for {target.format}: {known}")


class Target:
    """Base of every format. Subclasses set ``format`` and ``precisions`` and implement
    ``convert`` and ``runner``; subclassing registers them."""

    format: ClassVar[str]
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    Options: ClassVar[type[BaseModel]] = NoOptions
    # the Python package a device needs to run this format (named in error messages)
    device_runtime: ClassVar[str] = ""
    # op compat: op_type -> rule; ops not listed fall back to ``default_rule``
    compat_rules: ClassVar[dict[str, CompatRule]] = {}
    default_rule: ClassVar[CompatRule] = CompatRule("supported")
    # INT8 builds of this format start from the pipeline's static QDQ model (``static_qdq``)
    uses_static_qdq: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "format" in cls.__dict__:
            REGISTRY[cls.format] = cls

    # -- the three functions of the interface --------------------------------------------
    def convert(self, ctx: ConvertContext) -> Artifact:
        raise NotImplementedError

    def runner(self, artifact: Artifact) -> Runner | None:
        """A function NCHW float32 batch -> float32 outputs, or None when this host cannot
        run the format (then ``not_runnable_reason`` says why and the report says so)."""
        raise NotImplementedError

    def device_bench_spec(self, artifact: Artifact) -> dict[str, Any]:
        """What a device needs to run the artifact: files to upload, runtime to import."""
        return {"format": self.format, "precision": artifact.precision,
                "files": [artifact.path.name], "runtime": self.device_runtime}

    # -- on a device (`edgesmith bench`) ----------------------------------------------------
    # a stdlib-only file beside the format's module whose source the uploaded bench script
    # embeds (devices/remote.py, "format loaders", says what it defines); None: no loader
    device_loader: ClassVar[Path | None] = None
    # the Options field a device profile's ``cores`` fills when the profile leaves it unset
    device_threads_option: ClassVar[str] = ""

    def device_prebuild(self, options: BaseModel, meta: dict[str, Any],
                        force: bool | None) -> dict[str, Any] | None:
        """How to build the artifact on this machine for a device (JSON: e.g. a
        cross-compiler and flags), or None to upload it as it is. ``force``: the user's
        --prebuilt-c/--no-prebuilt-c, None when not given."""
        return None

    def build_for_device(self, name: str, folder: Path, plan: dict[str, Any],
                         out: Path) -> list[str]:
        """Build ``folder`` (the artifact) as ``plan`` says into the empty folder ``out``;
        returns the files there to upload instead of the artifact's."""
        raise NotImplementedError

    not_runnable_reason: ClassVar[str] = ""

    def host_latency_ms(self, artifact: Artifact, sample: np.ndarray) -> float | None:
        """p50 latency of one sample on this host, for formats whose runner does not time
        the inference alone (the C runner spawns a process per call). None: time the
        runner."""
        return None

    # -- compat ----------------------------------------------------------------------------
    # ONNX domains whose ops this format can take at all; anything else is unsupported
    domains: ClassVar[tuple[str, ...]] = ("", "ai.onnx")

    def rule_for(self, op_type: str, attrs: dict[str, Any], precision: str) -> CompatRule:
        """What the compat report asks: the domain check every format shares, then the
        format's own rules."""
        domain = attrs.get("domain") or ""
        if domain not in self.domains:
            known = ", ".join(sorted({d or "ai.onnx" for d in self.domains}))
            return CompatRule("unsupported",
                              f"custom domain {domain}: {self.format} takes ops of {known} only")
        return self.compat(op_type, attrs, precision)

    def compat(self, op_type: str, attrs: dict[str, Any], precision: str) -> CompatRule:
        """Override for rules that depend on attributes (e.g. Resize mode) or precision."""
        return self.compat_rules.get(op_type, self.default_rule)
