"""``format: c`` — a self-contained C runtime (static arena, mapped or embedded weights).

FP32 lowers the optimised ONNX; INT8 lowers a QDQ model (QAT's if the profile ran QAT,
else the static one the pipeline calibrates once for every INT8 target), turning
DQ -> op -> Q patterns into integer kernels. The folder is compiled with the host ``cc``
to prove it builds; cross-compilers named in the options are tried too.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from edgesmith.artifact import Artifact
from edgesmith.errors import ConversionError, ProfileError, UnsupportedOpError
from edgesmith.target import CompatRule, ConvertContext, Runner, Target

from .int8_input import InputOption
from .lower.gru import attr_problem as gru_attr_problem
from .tiling import TilingOption

_HINT = ("the C runtime has no kernel for this op; use another target (onnx, tflite) or "
         "replace the op in the model")


class COptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    weights: Literal["mmap", "embedded"] = "mmap"
    cc: str = "cc"
    cflags: str = "-O2"
    ldflags: str = ""
    alignment: Literal[16, 64] = 64
    # int8 convs, Gemm, GlobalAveragePool: fp32 rescaling (XNNPACK's and onnxruntime's
    # arithmetic; needs an FPU) or TFLite's integer-only fixed point
    requant: Literal["fp32", "fixed"] = "fp32"
    # cross-compilation: when set, the folder is also built with this compiler
    cross_cc: str | None = None
    cross_cflags: str = Field("-O2", description="flags for cross_cc")
    cross_ldflags: str = ""
    # patch-based execution of the leading conv chain (tiling.py): None = only when the
    # profile's budgets.arena_kb needs it; "auto" = whenever it lowers the arena; "off";
    # or {patches: N, split: <node name or step index>} to force it
    tiling: TilingOption = None
    # worker threads a heavy step's output channels are split over (threads.py); 1: the
    # single-thread code, no pthreads; > 1: a pool of threads - 1 workers started in es_init
    threads: int = Field(1, ge=1, le=64)
    # int8 builds: "int8" folds the input's QuantizeLinear out, the caller passes the input
    # quantized with model.h's ES_INPUT0_SCALE / _ZERO_POINT, as TFLite Micro's int8 models
    # take it (int8_input.py): no float copy of the input in the arena; "float_in_place"
    # takes float and writes its int8 copy over the input's own slot, so the two are never
    # live together, at the price of copying the input in again before each run
    input: InputOption = "float"

    @field_validator("threads")
    @classmethod
    def _no_threads_on_mcu(cls, v: int, info: ValidationInfo) -> int:
        """cross_cc / cross_cflags come before threads, so they are validated already."""
        if v > 1 and _mcu_build(info.data.get("cross_cc"), info.data.get("cross_cflags", "")):
            raise ValueError(_MCU_THREADS)
        return v


_MCU_THREADS = ("threads > 1 needs POSIX threads, which a bare-metal Cortex-M build does not "
                "have: set threads: 1 (the default) for this target")


def _mcu_build(cc: str | None, cflags: str) -> bool:
    """A Cortex-M cross build, told from the compiler and flags alone (no compiler run:
    options are checked when the profile is read)."""
    return bool(cc) and ("-mcpu=cortex-m" in cflags or "arm-none-eabi" in cc)


def _check_threads(opts: COptions, profile: Any) -> None:
    """threads > 1 on a profile whose device is a Cortex-M or runs bare metal: refused,
    whatever compiler the options name."""
    dev = getattr(profile, "device", None)
    if opts.threads > 1 and dev is not None and (
            getattr(dev, "arch", "") == "cortex-m" or getattr(dev, "os", "") == "baremetal"):
        raise ProfileError(f"c option threads: {_MCU_THREADS} (got {opts.threads})",
                           where=f"profile {getattr(profile, 'name', '?')}: targets: c",
                           fix="remove threads from the c target's options, or set it to 1")


def _rules() -> dict[str, CompatRule]:
    from .ir import supported_ops

    rules = {op: CompatRule("supported") for op in supported_ops()}
    for op in ("BatchNormalization", "Identity", "Dropout", "Reshape", "Flatten", "Squeeze",
               "Unsqueeze", "Cast", "Upsample"):
        if op in rules:
            rules[op] = CompatRule("lowered", "folded or turned into a view at generation time")
    # shape arithmetic (a dynamic batch's Shape -> Gather -> Equal/Where -> Expand, as a
    # ViT's class token exports): constant once the batch is fixed to 1, folded by ir.py
    for op in ("Shape", "ConstantOfShape", "Range", "Slice", "Equal", "Where", "Expand"):
        rules[op] = CompatRule("lowered", "only when it folds to a constant at generation time")
    return rules


class CTarget(Target):
    format = "c"
    precisions = ("fp32", "int8")
    Options = COptions
    device_runtime = ""  # a C compiler and make, nothing to import
    device_loader = Path(__file__).with_name("c_device.py")  # builds, runs edgesmith_bench
    compat_rules: ClassVar[dict[str, CompatRule]] = _rules()
    default_rule = CompatRule("unsupported", _HINT)
    uses_static_qdq = True

    def compat(self, op_type: str, attrs: dict[str, Any], precision: str) -> CompatRule:
        rule = CTarget.compat_rules.get(op_type, self.default_rule)
        if op_type == "Resize" and str(attrs.get("mode", "nearest")) not in (
                "nearest", "linear", "bilinear"):
            return CompatRule("unsupported", "Resize: only nearest and linear modes")
        if op_type in ("Conv", "MaxPool", "AveragePool") and len(
                attrs.get("kernel_shape", [])) > 2:
            return CompatRule("unsupported", f"{op_type}: only 1-D and 2-D")
        if op_type == "GRU" and (problem := gru_attr_problem(attrs)):  # lower/gru.py
            return CompatRule("unsupported", f"GRU: {problem[0]}; {problem[1]}")
        return rule

    # -- convert ---------------------------------------------------------------------------
    @staticmethod
    def _int8_model(ctx: ConvertContext) -> tuple[Path, str]:
        """(QDQ model, where it came from): the QAT export, else the pipeline's static one."""
        if ctx.qdq_onnx is not None:
            return Path(ctx.qdq_onnx), "qat"
        return CTarget._static_qdq(ctx), "static"

    @staticmethod
    def _static_qdq(ctx: ConvertContext) -> Path:
        if ctx.static_qdq is None:
            raise ConversionError("no static QDQ model was made for this INT8 target",
                                  where="c-int8", fix="report this: it is an edgesmith bug")
        return Path(ctx.static_qdq)

    def convert(self, ctx: ConvertContext) -> Artifact:
        from . import codegen, run

        opts: COptions = ctx.options  # type: ignore[assignment]
        _check_threads(opts, ctx.profile)
        precision = ctx.precision
        src, source = (Path(ctx.fp32_onnx), "fp32") if precision == "fp32" else \
            self._int8_model(ctx)
        out = Path(ctx.out_dir)
        power = codegen.PowerDefaults.of(getattr(ctx.profile, "power", None))
        kw = dict(precision=precision, embedded=opts.weights == "embedded", cc=opts.cc,
                  cflags=opts.cflags, ldflags=opts.ldflags, alignment=opts.alignment,
                  name=getattr(ctx.profile, "name", "model"), deploy_cc=opts.cross_cc,
                  deploy_cflags=opts.cross_cflags, requant=opts.requant, power=power,
                  preprocess=getattr(ctx.profile, "preprocess", None),  # model.h's spec
                  tiling=opts.tiling, arena_budget=arena_budget(ctx.profile),
                  threads=opts.threads, input=opts.input)
        ctx.log(f"c: lowering {src} ({precision}, {source})")
        try:
            gen = codegen.from_onnx(src, out, **kw)
        except UnsupportedOpError as e:
            if source != "qat":
                raise
            # a QAT export the C runtime cannot lower (e.g. per-channel activation
            # quantization): fall back to static calibration of the fp32 model
            ctx.log(f"c: the QAT model cannot be lowered ({e.what}); falling back to static "
                    "QDQ calibration (quantize_qdq) of the fp32 model")
            src, source = self._static_qdq(ctx), "static (QAT model not lowerable: " \
                f"{e.what})"
            gen = codegen.from_onnx(src, out, **kw)
        run.build(out, log=ctx.log)
        host = _HostBuild(out, built=True)  # the runner's binary: this build, not a second
        meta: dict[str, Any] = {**gen.plan.figures(), "weights_bytes": gen.weights_bytes,
                                "weights": opts.weights, "cc": opts.cc, "cflags": opts.cflags,
                                "source_onnx": src.name, "steps": _steps(out),
                                "power": power.figures(),  # model.h's ES_POWER_* defaults
                                "threads": opts.threads}
        if precision == "int8":
            meta["requant"] = opts.requant
            meta["int8_source"] = source
        if opts.cross_cc:
            import shutil
            import tempfile

            from . import mcu_size

            with tempfile.TemporaryDirectory(dir=ctx.work_dir) as tmp:
                # sources only: make would keep the host build's objects (it does not
                # track CC), and the cross build would prove and measure nothing
                shutil.copytree(out, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
                    "*.o", "*.a", "edgesmith_bench"))
                run.build(Path(tmp), cc=opts.cross_cc, cflags=opts.cross_cflags, log=ctx.log,
                          target="lib" if opts.weights == "embedded" else "edgesmith_bench")
                if mcu_size.targets_mcu(opts.cross_cc, opts.cross_cflags):  # flash, RAM
                    meta.update(mcu_size.measure(Path(tmp), opts.cross_cc,
                                                 opts.cross_cflags).figures())
            meta["cross_cc"] = opts.cross_cc
        _clean(out)
        artifact = Artifact.of(out, self.format, precision, **meta)
        _BUILDS[_build_key(artifact)] = host
        return artifact

    # -- run -------------------------------------------------------------------------------
    def runner(self, artifact: Artifact) -> Runner | None:
        import numpy as np

        from . import run

        build_dir = _host_build(artifact)

        def _run(x: np.ndarray) -> np.ndarray:
            return run.run(build_dir, x)

        return _run

    def host_latency_ms(self, artifact: Artifact, sample: Any) -> float | None:
        """p50 of ``edgesmith_bench --runs 50 --warmup 5 --no-power`` on ``sample`` (one
        sample of the model's input; a batch is cut to its first sample): the inference
        alone, without the process start the runner pays per call, nor the sleeps of the
        profile's power schedule, nor a change of this host's governor."""
        import tempfile

        import numpy as np

        from . import run

        build_dir = _host_build(artifact)
        (ishape,), _ = run.io_shapes(build_dir)
        x = np.ascontiguousarray(sample, dtype=np.float32)
        if x.shape != ishape and x.shape[1:] == ishape[1:]:
            x = x[:1]
        if x.size != int(np.prod(ishape)):
            return None
        with tempfile.TemporaryDirectory(prefix="es_lat_") as tmp:
            fin = Path(tmp) / "in.raw"
            run.raw_input(build_dir, x).tofile(fin)  # int8 for an input: int8 model
            # the compute time: the profile's power schedule (model.h) is for the device
            args = ["--input", str(fin), "--runs", "50", "--warmup", "5", "--no-power"]
            if (build_dir / "weights.bin").exists():
                args = ["--weights", str(build_dir / "weights.bin"), *args]
            res = run.run_bench(build_dir / "edgesmith_bench", args, cwd=build_dir)
        p50 = (res.get("latency_ms") or {}).get("p50")
        return float(p50) if p50 is not None else None

    def device_prebuild(self, options: BaseModel, meta: dict[str, Any],
                        force: bool | None) -> dict[str, Any] | None:
        """{cc, cflags} of an ``edgesmith_bench`` built here (--prebuilt-c, or a profile
        naming a ``cross_cc``), else None: the device runs make."""
        from . import c_prebuild

        return c_prebuild.plan(options, meta, force)

    def build_for_device(self, name: str, folder: Path, plan: dict[str, Any],
                         out: Path) -> list[str]:
        from . import c_prebuild

        return c_prebuild.build(name, folder, plan, out)

    def device_bench_spec(self, artifact: Artifact) -> dict[str, Any]:
        folder = Path(artifact.path)
        files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        weights = ["--weights", "weights.bin"] if (folder / "weights.bin").exists() else []
        return {"format": self.format, "precision": artifact.precision, "files": files,
                "runtime": self.device_runtime, "folder": folder.name,
                "build": ["make", "-j2"],
                "run": ["./edgesmith_bench", *weights, "--runs", "{runs}",
                        "--warmup", "{warmup}"],
                "run_shell": "make -j2 && ./edgesmith_bench " + " ".join(
                    shlex.quote(w) for w in weights) + " --runs {runs} --warmup {warmup}",
                "input": {"flag": "--input", "format": "raw float32 little-endian, NCHW"},
                "output": {"flag": "--output", "format": "raw float32 little-endian"},
                "arena_bytes": artifact.meta.get("arena_bytes")}


class _HostBuild:
    """One host build of an artifact, in a temp folder removed when the object dies (or at
    exit): runner and latency share it, and nothing is left in /tmp. ``built``: ``folder``
    holds the objects and binary of a host build with the Makefile's own flags (what
    ``convert`` just compiled), copied instead of compiled again."""

    def __init__(self, folder: Path, built: bool = False):
        import shutil
        import tempfile
        import weakref

        from . import run

        self.dir = Path(tempfile.mkdtemp(prefix="es_c_runner_"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.dir), True)
        try:
            shutil.copytree(folder, self.dir, dirs_exist_ok=True)
            if not (built and (self.dir / "edgesmith_bench").is_file()):
                run.build(self.dir)
        except BaseException:
            self._finalizer()
            raise


_BUILDS: dict[tuple[str, str], _HostBuild] = {}


def _build_key(artifact: Artifact) -> tuple[str, str]:
    return (str(Path(artifact.path).resolve()), artifact.sha256)


def _host_build(artifact: Artifact) -> Path:
    key = _build_key(artifact)
    b = _BUILDS.get(key)
    if b is None or not (b.dir / "edgesmith_bench").exists():
        b = _BUILDS[key] = _HostBuild(Path(artifact.path))
    return b.dir


def arena_budget(profile: Any) -> int | None:
    """budgets.arena_kb in bytes (None: no budget), what the tiling pass plans towards."""
    kb = getattr(getattr(profile, "budgets", None), "arena_kb", None)
    return int(kb * 1024) if kb else None


def _steps(folder: Path) -> int:
    import re

    m = re.search(r"#define ES_NUM_STEPS (\d+)", (folder / "model.h").read_text())
    return int(m.group(1)) if m else 0


def _clean(folder: Path) -> None:
    """Leave sources only: the artifact is what a device builds, not our host binary."""
    for p in list(folder.rglob("*.o")) + [folder / "edgesmith_bench",
                                          folder / "libedgesmith_model.a"]:
        p.unlink(missing_ok=True)
