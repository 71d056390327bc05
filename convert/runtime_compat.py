"""Static check: can the device's declared runtime release load this artifact at all?

Per format, the artifact's versioned parts against what that exact release supports:

- TFLite: every operator code's (builtin, version) in the flatbuffer against the versions
  that release registers. No hand-typed table: each pair is probed once in the release
  itself (``runtime_env``): the artifact re-packed with every opcode at version 1, then one
  opcode at a time at version v; the release's Interpreter resolves ops at construction
  and refuses an unregistered one ("Didn't find op for builtin opcode ... version N").
  Answers are cached beside the env, so later builds read them without starting Python.
- ONNX: the default-domain opset and the IR version against the highest each release
  loads, probed with a one-node model at opset N / IR N.
- OpenVINO: each layer's ``opsetN`` in the IR against the opsets the release ships.
- Core ML: the model's spec version against the deployment target's (coremltools maps
  iOS/macOS releases to spec versions); no environment needed.

A mismatch is a ``Finding`` naming the op, its version and the runtime's maximum; the
pipeline turns findings into the target's failure, with the fix.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from edgesmith.convert import runtime_env

PROBES = "probes.json"  # inside the env's folder: {"<kind>:<name>:<version>": bool, ...}


@dataclass(frozen=True)
class Finding:
    """One part of the artifact the runtime cannot load."""

    op: str  # CONV_2D, the ONNX opset, an OpenVINO layer type
    version: int  # what the artifact uses
    max_version: int | None  # the newest the runtime takes; None: the op is unknown there
    where: str = ""  # operator index, layer name

    def text(self) -> str:
        have = ("not registered at any version" if self.max_version is None
                else f"max {self.max_version}")
        at = f" ({self.where})" if self.where else ""
        return f"{self.op} version {self.version}{at}: {have}"


@dataclass
class StaticCheck:
    runtime: str  # the requirement string, or "iOS16"
    status: str  # ok | op missing | not checked
    findings: list[Finding] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"runtime": self.runtime, "status": self.status}
        if self.findings:
            d["findings"] = [asdict(f) for f in self.findings]
        if self.note:
            d["note"] = self.note
        return d


def declared(fmt: str, runtimes: Any) -> str | None:
    """The profile's runtime entry for a format (``runtimes`` is the schema's Runtimes);
    None when the profile names none, and the check does not apply."""
    if fmt == "coreml":
        c = runtimes.coreml
        if c is None or (c.ios is None and c.macos is None):
            return None
        return f"iOS{c.ios}" if c.ios is not None else f"macOS{c.macos}"
    attr = {"tflite": "tflite", "onnx": "onnxruntime", "openvino": "openvino"}.get(fmt)
    return getattr(runtimes, attr) if attr else None


def check(fmt: str, artifact_path: Path, runtime: str, env: runtime_env.RuntimeEnv | None
          ) -> StaticCheck:
    """The static check of one artifact against one declared runtime."""
    if fmt == "coreml":
        return _coreml(artifact_path, runtime)
    if env is None:
        return StaticCheck(runtime, "not checked", note="no environment for this runtime")
    fn = {"tflite": _tflite, "onnx": _onnx, "openvino": _openvino}.get(fmt)
    if fn is None:
        return StaticCheck(runtime, "not checked", note=f"no static check for {fmt}")
    findings = fn(artifact_path, env)
    return StaticCheck(runtime, "op missing" if findings else "ok", findings)


# -- probe cache ------------------------------------------------------------------------------
def _load_probes(env: runtime_env.RuntimeEnv) -> dict[str, Any]:
    try:
        return json.loads((env.path / PROBES).read_text())
    except (OSError, ValueError):
        return {}


def _store_probes(env: runtime_env.RuntimeEnv, new: dict[str, Any]) -> None:
    """Merge ``new`` into the cache atomically (temp + rename): a reader never sees half."""
    table = {**_load_probes(env), **new}
    fd, tmp = tempfile.mkstemp(dir=env.path, prefix=".probes-")
    with os.fdopen(fd, "w") as f:
        json.dump(table, f, indent=0, sort_keys=True)
    os.replace(tmp, env.path / PROBES)


def _probe_error(env: runtime_env.RuntimeEnv, proc) -> runtime_env.RuntimeEnvError:
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-4:]
    return runtime_env.RuntimeEnvError(
        f"probing {env.requirement} failed (exit {proc.returncode}): " + " | ".join(tail),
        where=str(env.path), fix="delete that folder to have it created again; if it "
                                 "recurs, the release does not start on this host")


# -- TFLite -------------------------------------------------------------------------------------
_TFLITE_PROBE = """
import json, sys
try:
    from tflite_runtime.interpreter import Interpreter
except ImportError:
    from ai_edge_litert.interpreter import Interpreter
out = {}
for path in sys.argv[1:]:
    try:
        Interpreter(model_path=path)
        out[path] = "ok"
    except Exception as e:
        out[path] = str(e)[:400]
print(json.dumps(out))
"""


def _schema():
    from ai_edge_litert import schema_py_generated as schema  # ~0.2 s, no TensorFlow

    return schema


def builtin_code(oc) -> int:
    """An operator code's builtin: codes past 127 sit in ``builtinCode`` with the int8
    ``deprecatedBuiltinCode`` at 127, older files have only the latter."""
    return max(int(oc.builtinCode or 0), int(oc.deprecatedBuiltinCode or 0))


def tflite_model(path: Path):
    """The .tflite at ``path`` as the schema's object tree (ModelT), for reading or editing."""
    return _schema().ModelT.InitFromPackedBuf(bytearray(Path(path).read_bytes()), 0)


def write_tflite(model, dst: Path) -> None:
    """Pack a ModelT (edited or not) into a .tflite file."""
    import flatbuffers

    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    Path(dst).write_bytes(bytes(b.Output()))


def tflite_opcodes(path: Path) -> list[tuple[str, int, int]]:
    """(builtin name, builtin code, version) of each operator code; custom ops left out."""
    schema = _schema()
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    out = []
    for oc in tflite_model(path).operatorCodes or []:
        code = builtin_code(oc)
        if oc.customCode:
            continue
        out.append((names.get(code, f"BUILTIN_{code}"), code, int(oc.version or 1)))
    return out


def set_tflite_versions(src: Path, dst: Path, versions: dict[int, int]) -> None:
    """Write ``src`` with operator code i at ``versions[i]`` (all others unchanged):
    the probe's variants, and how tests make a model with a too-new op version."""
    model = tflite_model(src)
    for i, oc in enumerate(model.operatorCodes or []):
        if i in versions:
            oc.version = versions[i]
    write_tflite(model, dst)


def _tflite(path: Path, env: runtime_env.RuntimeEnv) -> list[Finding]:
    codes = tflite_opcodes(path)
    probes = _load_probes(env)
    # a pair is answered by the cache, else probed: first each op at its own version, then
    # (for the refused ones) every lower version, to name the runtime's maximum
    wanted = {(i, v) for i, (_, _, v) in enumerate(codes)}
    _probe_tflite(path, env, codes, wanted, probes)
    refused = [(i, v) for i, (_, c, v) in enumerate(codes) if not probes[f"tflite:{c}:{v}"]]
    _probe_tflite(path, env, codes, {(i, w) for i, v in refused for w in range(1, v)}, probes)
    findings = []
    for i, v in refused:
        name, code, _ = codes[i]
        ok = [w for w in range(1, v) if probes[f"tflite:{code}:{w}"]]
        findings.append(Finding(name, v, max(ok) if ok else None, f"operator code {i}"))
    return findings


def _probe_tflite(path: Path, env: runtime_env.RuntimeEnv, codes: list[tuple[str, int, int]],
                  pairs: set[tuple[int, int]], probes: dict[str, Any]) -> None:
    """Answer each (opcode index, version) pair not in ``probes`` (updated in place) with
    one run of the release: a variant per pair, every other opcode at version 1."""
    todo = sorted({(i, w) for i, w in pairs if f"tflite:{codes[i][1]}:{w}" not in probes})
    if not todo:
        return
    base = {i: 1 for i in range(len(codes))}
    with tempfile.TemporaryDirectory(prefix="tflite-probe-") as tmp:
        files = {}
        for i, w in todo:
            f = Path(tmp) / f"op{i}-v{w}.tflite"
            set_tflite_versions(path, f, {**base, i: w})
            files[str(f)] = (i, w)
        proc = runtime_env.run_script(env, _TFLITE_PROBE, list(files))
        try:
            answers = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise _probe_error(env, proc) from None
    new = {}
    for f, (i, w) in files.items():
        msg = answers.get(f, "")
        if msg != "ok" and "find op for builtin opcode" not in msg:
            raise runtime_env.RuntimeEnvError(
                f"{env.requirement} cannot read the model at all: {msg}", where=str(path),
                fix="the model's flatbuffer is newer than this release reads; convert with "
                    "an older converter, or declare a newer release in the profile")
        new[f"tflite:{codes[i][1]}:{w}"] = msg == "ok"
    probes.update(new)
    _store_probes(env, new)


# -- ONNX -----------------------------------------------------------------------------------
_ONNX_PROBE = """
import json, sys
import onnxruntime as ort
ort.set_default_logger_severity(4)
out = {}
for path in sys.argv[1:]:
    try:
        ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        out[path] = "ok"
    except Exception as e:
        out[path] = str(e)[:300]
print(json.dumps(out))
"""


def onnx_versions(path: Path) -> tuple[int, int]:
    """(default-domain opset, IR version) of an ONNX file, read without its weights."""
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=1)
    return opset, m.ir_version


def onnx_limits(env: runtime_env.RuntimeEnv) -> tuple[int, int]:
    """(max opset, max IR version) the onnxruntime release loads, probed once."""
    probes = _load_probes(env)
    if "onnx:max_opset" not in probes:
        new = _probe_onnx(env)
        _store_probes(env, new)
        probes.update(new)
    return int(probes["onnx:max_opset"]), int(probes["onnx:max_ir"])


def _one_node(opset: int, ir: int, path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    onnx.save(model, str(path))


def _probe_onnx(env: runtime_env.RuntimeEnv) -> dict[str, int]:
    import onnx

    # opsets at a low IR, IR versions at a low opset: each limit probed on its own
    opsets = range(7, onnx.defs.onnx_opset_version() + 3)
    irs = range(3, onnx.IR_VERSION + 3)
    with tempfile.TemporaryDirectory(prefix="onnx-probe-") as tmp:
        files = {}
        for n in opsets:
            files[str(Path(tmp) / f"opset{n}.onnx")] = ("opset", n)
            _one_node(n, 7, Path(tmp) / f"opset{n}.onnx")
        for n in irs:
            files[str(Path(tmp) / f"ir{n}.onnx")] = ("ir", n)
            _one_node(7, n, Path(tmp) / f"ir{n}.onnx")
        proc = runtime_env.run_script(env, _ONNX_PROBE, list(files))
        try:
            answers = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise _probe_error(env, proc) from None
    ok = {kind: [n for f, (k, n) in files.items() if k == kind and answers.get(f) == "ok"]
          for kind in ("opset", "ir")}
    if not ok["opset"] or not ok["ir"]:
        raise _probe_error(env, proc)
    return {"onnx:max_opset": max(ok["opset"]), "onnx:max_ir": max(ok["ir"])}


def _onnx(path: Path, env: runtime_env.RuntimeEnv) -> list[Finding]:
    opset, ir = onnx_versions(path)
    max_opset, max_ir = onnx_limits(env)
    findings = []
    if opset > max_opset:
        findings.append(Finding("ai.onnx opset", opset, max_opset, "opset_import"))
    if ir > max_ir:
        findings.append(Finding("ONNX IR", ir, max_ir, "ir_version"))
    return findings


# -- OpenVINO -------------------------------------------------------------------------------
_OPENVINO_PROBE = """
import importlib, json
n = 0
for i in range(1, 64):
    for mod in ("openvino.runtime.opset%d" % i, "openvino.opset%d" % i):
        try:
            importlib.import_module(mod)
            n = i
            break
        except ImportError:
            pass
print(json.dumps({"openvino:max_opset": n}))
"""


def _openvino(path: Path, env: runtime_env.RuntimeEnv) -> list[Finding]:
    import xml.etree.ElementTree as ET

    probes = _load_probes(env)
    if "openvino:max_opset" not in probes:
        proc = runtime_env.run_script(env, _OPENVINO_PROBE, [])
        try:
            new = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise _probe_error(env, proc) from None
        _store_probes(env, new)
        probes.update(new)
    top = int(probes["openvino:max_opset"])
    findings = []
    for layer in ET.parse(path).getroot().iter("layer"):
        v = layer.get("version", "")
        if v.startswith("opset") and v[5:].isdigit() and int(v[5:]) > top:
            findings.append(Finding(f"{layer.get('type')} ({v})", int(v[5:]), top,
                                    f"layer {layer.get('name')}"))
    return findings


# -- Core ML --------------------------------------------------------------------------------
def coreml_spec_limit(runtime: str) -> int | None:
    """The spec version a deployment target (``iOS16``, ``macOS13``) loads, from
    coremltools' own map; None for a release coremltools does not know."""
    import coremltools as ct

    member = ct.target.__members__.get(runtime)
    return int(member.value) if member is not None else None


def _coreml(path: Path, runtime: str) -> StaticCheck:
    import coremltools as ct

    limit = coreml_spec_limit(runtime)
    if limit is None:
        return StaticCheck(runtime, "not checked", note=f"coremltools knows no {runtime}")
    spec = ct.utils.load_spec(str(path))
    have = int(spec.specificationVersion)
    if have <= limit:
        return StaticCheck(runtime, "ok")
    return StaticCheck(runtime, "op missing",
                       [Finding("Core ML spec", have, limit, "specificationVersion")])


def tflite_output_lsb(path: Path) -> float | None:
    """The quantization step of the first output: its own scale when it is an integer
    tensor, else (float I/O around an INT8 body) the scale of the tensor its DEQUANTIZE
    reads. None for a float model. One LSB of it is how far two runtimes may differ."""
    schema = _schema()
    model = tflite_model(path)
    sub = model.subgraphs[0]
    out = int(sub.outputs[0])
    scale = _scale(sub.tensors[out])
    if scale is not None:
        return scale
    codes = model.operatorCodes or []
    for op in sub.operators or []:
        code = builtin_code(codes[op.opcodeIndex])
        if out in list(op.outputs) and code == schema.BuiltinOperator.DEQUANTIZE:
            return _scale(sub.tensors[int(op.inputs[0])])
    return None


def _scale(tensor: Any) -> float | None:
    q = tensor.quantization
    scales = list(q.scale) if q is not None and q.scale is not None else []
    return float(scales[0]) if len(scales) == 1 and scales[0] > 0 else None
