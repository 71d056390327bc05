"""OpenVINO IR: ``.xml`` + ``.bin`` from the optimized ONNX, fp32 / fp16 / INT8.

* fp32: ``openvino.convert_model`` as is; the IR keeps the ONNX layout (NCHW) and the
  dynamic batch axis, so the runner feeds what the torch model takes.
* fp16: the same graph saved with ``compress_to_fp16``: weights stored as f16 (half the
  size); the CPU plugin decompresses them and computes in f32.
* int8: when the profile ran QAT (``ctx.qdq_onnx``), its Q/DQ pairs become the IR's
  FakeQuantize nodes, keeping the scales training learned; otherwise ``nncf.quantize``
  calibrates the OV model on the shared calibration set (post-training); the option
  ``float_nodes`` (ONNX node names) becomes nncf's ``ignored_scope``, which is how the
  accuracy-aware fallback (pipeline/fallback.py) keeps layers in float. nncf quantizes the
  inputs of the ops that compute (convolutions, MatMul, Add...), so an activation's output
  quantizer belongs to its consumers: when one is left on a float node's output after
  quantizing, those consumers join the ignored scope and nncf runs again (a HardSwish
  feeding a convolution keeps its output in float only that way).

nncf's defaults are not the scheme the other INT8 targets use, and two of them broke parity
on trained nets (issue 15), so ``_activation_params`` overrides them:

* activation ranges: nncf averages each sample's min/max (``MEAN_MINMAX``), which clips every
  sample whose activations exceed the average; the profile's ``minmax`` means the min/max over
  all calibration samples, as onnxruntime takes it (ResNet-18: max error 0.33 -> 0.06 of the
  output range);
* per-tensor activations: nncf quantizes the inputs of depthwise convolutions per channel,
  and OpenVINO 2026.4's CPU plugin computes such a FakeQuantize wrongly once it fuses it into
  the int8 convolution before it (MobileNetV3-small: 209 off where the FakeQuantize's own
  formula gives 0.06; cosine of the logits 0.15).
* preset ``mixed`` by default: asymmetric activations, as onnxruntime's QDQ; HardSwish's
  output spans [-0.375, max], so a symmetric range wastes half of its 256 levels.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from edgesmith.artifact import Artifact, sha256_path
from edgesmith.capture import capture_output
from edgesmith.convert._stages import run_stage
from edgesmith.convert.onnx_graph import consumers_of
from edgesmith.errors import ConversionError
from edgesmith.target import CompatRule, ConvertContext, Runner, Target

FORMAT = "openvino"
MAX_FUSED = 2  # ONNX nodes after a float node that OpenVINO may have fused it into
MAX_ROUNDS = 2  # extra nncf.quantize runs to move the float nodes' output quantizers


class OpenVINOOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    device: str = Field("CPU", description="OpenVINO device the runner compiles for")
    num_threads: int = Field(1, ge=0, le=256, description="inference threads; 0 = plugin default")
    preset: Literal["performance", "mixed"] = Field(
        "mixed", description="nncf preset: symmetric (performance) or asymmetric (mixed) "
                             "activations; mixed is what the other INT8 targets use")
    fast_bias_correction: bool = True
    float_nodes: list[str] = Field(
        default_factory=list,
        description="ONNX node names nncf leaves unquantized at int8 (its ignored_scope); "
                    "the accuracy-aware fallback fills it with the layers it keeps in float")


class OpenVINOTarget(Target):
    format = FORMAT
    precisions = ("fp32", "fp16", "int8")
    Options = OpenVINOOptions
    device_runtime = "openvino"
    device_loader = Path(__file__).with_name("openvino_device.py")
    device_threads_option = "num_threads"
    # calibration methods with ranges of their own (any method but minmax: nncf's mean of
    # per-sample min/max); the accuracy-aware fallback tries them before layers in float
    range_methods = ("minmax", "percentile", "entropy", "mse")
    # observed with openvino 2026.4 (tests/convert/test_compat_rules.py); its ONNX frontend
    # covers nearly the whole default domain
    compat_rules = {
        "Det": CompatRule("unsupported", "the OpenVINO ONNX frontend has no Det conversion"),
    }

    def convert(self, ctx: ConvertContext) -> Artifact:
        import openvino as ov

        precision = ctx.precision
        ctx.out_dir.mkdir(parents=True, exist_ok=True)
        xml = ctx.out_dir / "model.xml"
        meta: dict[str, Any] = {"converter": f"openvino {ov.__version__}",
                                "device": ctx.options.device,
                                "num_threads": ctx.options.num_threads}
        source = ctx.qdq_onnx if precision == "int8" and ctx.qdq_onnx is not None else None
        with _captured(ctx, "nncf", "openvino"):
            model = _stage(ctx, "conversion (openvino.convert_model)",
                           lambda: ov.convert_model(str(source or ctx.fp32_onnx)))
            if precision == "int8" and source is not None:
                meta["source"] = "QAT export (Q/DQ pairs -> FakeQuantize)"
            elif precision == "int8":
                model, ignored = _stage(ctx, "int8 calibration (nncf.quantize)",
                                        lambda: _quantize(model, ctx))
                meta["source"] = "post-training nncf.quantize"
                meta["calibration"] = ctx.calib.summary()
                meta["nncf"] = {"preset": ctx.options.preset, "activations": "per-tensor",
                                "activation_ranges": ("min/max over all samples"
                                                      if ctx.calib.method == "minmax"
                                                      else "mean of per-sample min/max")}
                if ctx.options.float_nodes:
                    meta["float_nodes"] = list(ctx.options.float_nodes)
                    meta["nncf"]["ignored_scope"] = ignored  # the OpenVINO ops left in float
            else:
                meta["source"] = "optimized export"
            _stable_names(model)
            _stage(ctx, "save", lambda: ov.save_model(model, str(xml),
                                                      compress_to_fp16=precision == "fp16"))
        meta.update(_describe(xml))
        ctx.log(f"openvino {precision}: {xml} ops={meta['ops']}")
        return _ir_artifact(xml, precision, meta)

    def runner(self, artifact: Artifact) -> Runner:
        import openvino as ov

        config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32"}
        if artifact.meta.get("num_threads"):
            config["INFERENCE_NUM_THREADS"] = int(artifact.meta["num_threads"])
        compiled = ov.Core().compile_model(str(artifact.path),
                                           artifact.meta.get("device", "CPU"), config)
        request = compiled.create_infer_request()
        out = compiled.output(0)

        def run(x: np.ndarray) -> np.ndarray:
            result = request.infer({0: np.ascontiguousarray(x, dtype=np.float32)})
            return np.array(result[out], dtype=np.float32)

        return run

    def device_bench_spec(self, artifact: Artifact) -> dict[str, Any]:
        spec = super().device_bench_spec(artifact)
        spec["files"] = ["model.xml", "model.bin"]
        spec["device"] = artifact.meta.get("device", "CPU")
        return spec


def _quantize(model, ctx: ConvertContext) -> tuple[Any, list[str]]:
    """The INT8 model, and the OpenVINO ops nncf was told to leave in float."""
    import nncf

    calib = ctx.calib
    dataset = nncf.Dataset(list(calib.batches(1)))
    preset = (nncf.QuantizationPreset.MIXED if ctx.options.preset == "mixed"
              else nncf.QuantizationPreset.PERFORMANCE)
    if calib.method != "minmax":
        ctx.log(f"note: nncf has no {calib.method} calibration; activation ranges are its "
                f"mean over samples of each sample's min/max")
    kept = _ignored_ops(model, ctx.options.float_nodes, ctx.fp32_onnx)
    ignored = list(kept)

    def run():
        ctx.log(f"nncf {nncf.__version__} quantize: preset={ctx.options.preset} "
                f"subset_size={calib.samples} fast_bias_correction="
                f"{ctx.options.fast_bias_correction} activations=per-tensor, "
                f"{'min/max over all samples' if calib.method == 'minmax' else 'mean min/max'}"
                f" ignored_scope={ignored}")
        return nncf.quantize(model.clone(), dataset, preset=preset, subset_size=calib.samples,
                             fast_bias_correction=ctx.options.fast_bias_correction,
                             ignored_scope=nncf.IgnoredScope(names=ignored) if ignored else None,
                             advanced_parameters=_activation_params(calib.method))

    quantized = run()
    for _ in range(MAX_ROUNDS):
        carriers = [n for n in _output_quantizer_users(quantized, kept) if n not in ignored]
        if not carriers:
            return quantized, ignored
        ctx.log(f"float_nodes: the quantizers on the outputs of {kept} sit on the inputs of "
                f"{carriers}; ignoring those as well")
        ignored += carriers
        quantized = run()
    return quantized, ignored


def _output_quantizer_users(quantized, ops: list[str]) -> list[str]:
    """The ops reading a FakeQuantize that quantizes an output of one of ``ops``: nncf
    puts an activation's quantizer on its consumers' inputs (a HardSwish's on the next
    convolution), so ignoring the activation alone leaves its output quantized; ignoring
    these consumers removes that quantizer."""
    wanted = set(ops)
    users: list[str] = []
    for op in quantized.get_ops():
        if op.get_type_name() != "FakeQuantize" or \
                op.input_value(0).get_node().get_friendly_name() not in wanted:
            continue
        for target in op.output(0).get_target_inputs():
            name = target.get_node().get_friendly_name()
            if name not in users:
                users.append(name)
    return users


def _activation_params(method: str):
    """Per-tensor activations, with ranges over the whole calibration set for ``minmax``:
    nncf's defaults (per-channel inputs of depthwise convolutions, per-sample min/max
    averaged) are what lost parity on trained nets; the module docstring has the figures."""
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        QuantizationParameters,
    )
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    ranges = {"activations_range_estimator_params": RangeEstimatorParametersSet.MINMAX}
    return AdvancedQuantizationParameters(
        activations_quantization_params=QuantizationParameters(per_channel=False),
        **(ranges if method == "minmax" else {}))


def _ignored_ops(model, onnx_nodes: list[str], fp32_onnx: Path) -> list[str]:
    """The OpenVINO ops an ONNX node became: the frontend keeps the node's name on its
    last op and names the others under it (a Conv with bias is ``<name>/WithoutBiases``
    then the ``<name>`` Add; a Gemm a ``<name>/WithoutBiases`` MatMul). A node OpenVINO
    fused into the op after it (Sigmoid then Mul became one Swish named after the Mul) is
    that op: its single consumer is followed, up to ``MAX_FUSED`` steps."""
    names = [op.get_friendly_name() for op in model.get_ops()]
    consumers = _onnx_consumers(fp32_onnx) if onnx_nodes else {}
    found: list[str] = []
    for node in onnx_nodes:
        hits: list[str] = []
        step = node
        for _ in range(MAX_FUSED + 1):
            hits = [n for n in names if n == step or n.startswith(step + "/")]
            if hits or len(consumers.get(step, [])) != 1:
                break
            step = consumers[step][0]
        if not hits:
            raise ConversionError(f"float_nodes: no op of the OpenVINO model comes from "
                                  f"ONNX node {node!r}", where="openvino int8 options",
                                  fix="name nodes of the optimized ONNX (model.onnx in the "
                                      "build folder)")
        found += [h for h in hits if h not in found]
    return found


def _onnx_consumers(fp32_onnx: Path) -> dict[str, list[str]]:
    """ONNX node name -> the names of the nodes reading its first output."""
    import onnx

    graph = onnx.load(str(fp32_onnx), load_external_data=False).graph
    readers = consumers_of(graph)
    return {n.name: [r.name for r in readers.get(n.output[0], [])]
            for n in graph.node if n.output}


def _stage(ctx: ConvertContext, stage: str, fn):
    return run_stage(ctx, FORMAT, stage, fn)


@contextlib.contextmanager
def _captured(ctx: ConvertContext, *loggers: str):
    """The libraries' logging and what they print (nncf's progress bars, OpenVINO's C++
    messages) go to the target's log while converting, not to the terminal."""
    ctx.log_path.parent.mkdir(parents=True, exist_ok=True)
    sink: list[str] = []
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
    saved = []
    for name in loggers:
        lg = logging.getLogger(name)
        saved.append((lg, lg.propagate))
        lg.addHandler(handler)
        lg.propagate = False
    try:
        with capture_output(sink):
            yield
    finally:
        for lg, propagate in saved:
            lg.removeHandler(handler)
            lg.propagate = propagate
        if "".join(sink).strip():
            ctx.log("".join(sink))


def _describe(xml: Path) -> dict[str, Any]:
    import openvino as ov

    model = ov.Core().read_model(str(xml))
    ops: dict[str, int] = {}
    for op in model.get_ops():
        t = op.get_type_name()
        if t not in ("Parameter", "Result", "Constant"):
            ops[t] = ops.get(t, 0) + 1

    def ports(items):
        return [{"name": p.get_any_name(), "shape": str(p.get_partial_shape()),
                 "dtype": p.get_element_type().get_type_name()} for p in items]

    return {"inputs": ports(model.inputs), "outputs": ports(model.outputs), "ops": ops}


def _ir_artifact(xml: Path, precision: str, meta: dict[str, Any]) -> Artifact:
    """The artifact is both files: size and hash cover the weights as well as the graph,
    so the hash is the folder's (``sha256_of`` says so in the manifest)."""
    files = [xml, xml.with_suffix(".bin")]
    meta = {**meta, "size_bytes": sum(f.stat().st_size for f in files),
            "weights_bytes": files[1].stat().st_size, "files": [f.name for f in files],
            "sha256_of": "folder"}
    return Artifact(path=xml, format=FORMAT, precision=precision,
                    sha256=sha256_path(xml.parent), meta=meta)


def _stable_names(model) -> None:
    """OpenVINO names the nodes it creates (``Constant_6975``) from a process-wide counter,
    so the same conversion run twice in one process writes different XML. Renumber those
    auto-generated names by graph order; names that came from the ONNX model are kept."""
    import re

    for i, op in enumerate(model.get_ordered_ops()):
        # "<Type>_<n>", also for a folded node that kept its old type's name (Reshape_15
        # on a Const); ONNX names carry '/' or '::' and never match
        auto = re.fullmatch(r"([A-Za-z][A-Za-z0-9]*)_\d+", op.get_friendly_name())
        if auto:
            op.set_friendly_name(f"{auto.group(1)}_{i}")
