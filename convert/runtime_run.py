"""Dynamic check: run an artifact on exactly the declared runtime release and compare.

The artifact runs in the release's isolated environment (``runtime_env``) through the
same stdlib-only loader a device runs (``Target.device_loader``, e.g. ``tflite_device.py``,
which takes tflite-runtime when ai-edge-litert is absent, as it is there), on the build's
recorded validation tensors. Its outputs are compared with the host's run of the same
artifact: INT8 outputs within one LSB of the output's quantization scale, float outputs
within the parity bounds the caller passes (the build's own).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.convert import runtime_env, tflite

# Runs in the env: the format's device loader, fed one sample at a time, as on a device.
_RUNNER = '''
import json, sys, types
import numpy as np
from importlib import metadata

class Missing(Exception):
    pass

def version(dist, module=None):
    try:
        return metadata.version(dist)
    except Exception:
        return getattr(module, "__version__", None)

loader_path, model, x_path, out_path, options = sys.argv[1:6]
ns = {"__name__": "edgesmith_loader"}
exec(compile(open(loader_path).read(), loader_path, "exec"), ns)
rt = types.SimpleNamespace(numpy=lambda: np, version=version, Missing=Missing)
args = types.SimpleNamespace(model=model, threads=1, options=json.loads(options))
x = np.load(x_path)
try:
    name, ver, prepare, run, to_list = ns["load"](args, tuple(x.shape[1:]), rt)
    outs = [to_list(run(prepare(s.ravel().tolist()))) for s in x]
except Exception as e:
    print(json.dumps({"error": "%s: %s" % (type(e).__name__, str(e)[:600])}))
    sys.exit(3)
np.save(out_path, np.asarray(outs, dtype=np.float64))
print(json.dumps({"runtime": name, "version": ver}))
'''

# what a runtime says when the model asks for an op (version) it does not have
_MISSING_MARKS = ("find op for builtin opcode", "opset", "ir version", "not implemented",
                  "could not find an implementation", "unsupported operation", "not registered")


@dataclass
class DynamicCheck:
    status: str  # ok | op missing | disagrees | error
    runtime: str
    samples: int = 0
    max_abs_diff: float | None = None
    tolerance: str = ""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"status": self.status, "runtime": self.runtime,
                             "samples": self.samples}
        if self.max_abs_diff is not None:
            d["max_abs_diff"] = self.max_abs_diff
        if self.tolerance:
            d["tolerance"] = self.tolerance
        if self.detail:
            d["detail"] = self.detail
        return d


def run_in_env(env: runtime_env.RuntimeEnv, loader: Path, artifact_path: Path,
               x: np.ndarray, options: dict[str, Any] | None = None
               ) -> tuple[np.ndarray | None, str]:
    """(outputs, one sample per row, flattened; "" ) or (None, the runtime's error)."""
    with tempfile.TemporaryDirectory(prefix="runtime-run-") as tmp:
        x_path, out_path = Path(tmp) / "x.npy", Path(tmp) / "y.npy"
        np.save(x_path, np.ascontiguousarray(x, dtype=np.float32))
        proc = runtime_env.run_script(
            env, _RUNNER, [str(loader), str(artifact_path), str(x_path), str(out_path),
                           json.dumps(options or {})])
        if proc.returncode == 0 and out_path.is_file():
            return np.load(out_path), ""
    try:
        return None, json.loads(proc.stdout.strip().splitlines()[-1])["error"]
    except (ValueError, IndexError, KeyError, TypeError):
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        return None, f"exit {proc.returncode}: " + " | ".join(tail)


def compare(host: np.ndarray, dev: np.ndarray, lsb: float | None, min_cosine: float,
            max_rel_err: float) -> tuple[bool, float, str]:
    """(agrees, max |diff|, the bound applied). INT8 outputs: within one LSB; float ones:
    cosine and error relative to the output's range, as the build judges parity."""
    a = np.asarray(host, np.float64).reshape(len(host), -1)
    b = np.asarray(dev, np.float64).reshape(len(dev), -1)
    if a.shape != b.shape:
        return False, float("inf"), f"shapes differ: host {a.shape}, runtime {b.shape}"
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    if lsb is not None:
        bound = lsb * (1 + 1e-4)
        return diff <= bound, diff, f"abs diff <= 1 LSB ({lsb:.6g})"
    span = float(np.max(a) - np.min(a)) or 1.0
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    cos = float(np.mean(np.sum(a * b, axis=1) / np.maximum(na * nb, 1e-30)))
    ok = cos >= min_cosine and diff / span <= max_rel_err
    return ok, diff, f"cosine >= {min_cosine}, abs diff / range <= {max_rel_err} (cosine {cos:.6f})"


def check(env: runtime_env.RuntimeEnv, loader: Path, artifact_path: Path, x: np.ndarray,
          host_outs: dict[str, np.ndarray], *, lsb: float | None, min_cosine: float,
          max_rel_err: float, options: dict[str, Any] | None = None) -> DynamicCheck:
    """Run the artifact in ``env`` and judge its outputs against the host's: within ``lsb``
    (the output's quantization step, for INT8 bodies) or the float bounds, of at least
    one of ``host_outs`` (kernel set -> outputs: an INT8 model's outputs depend on the
    kernels' requantization, and a release may default to other kernels than the host)."""
    out, err = run_in_env(env, loader, artifact_path, x, options)
    if out is None:
        missing = any(m in err.lower() for m in _MISSING_MARKS)
        return DynamicCheck("op missing" if missing else "error", env.requirement, len(x),
                            detail=err)
    judged = {name: compare(h, out, lsb, min_cosine, max_rel_err)
              for name, h in host_outs.items()}
    name = min(judged, key=lambda k: (not judged[k][0], judged[k][1]))
    ok, diff, bound = judged[name]
    others = "; ".join(f"{k}: max abs diff {v[1]:.4g}" for k, v in judged.items() if k != name)
    return DynamicCheck("ok" if ok else "disagrees", env.requirement, len(x),
                        round(diff, 8) if np.isfinite(diff) else None,
                        f"{bound} against the host's {name}", others)


def tflite_builtin_runner(path: Path, num_threads: int = 1):
    """The host's ai-edge-litert with its builtin kernels only (no default XNNPACK
    delegate): the kernel set tflite-runtime 2.14 runs INT8 models with, bit for bit on
    MobileNetV2-digits32, where XNNPACK's requantization differs by up to 19 LSB."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(str(path), num_threads=num_threads,
                         experimental_op_resolver_type=(
                             OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES))
    interp.allocate_tensors()
    inp, out = interp.get_input_details()[0], interp.get_output_details()[0]

    def run(x: np.ndarray) -> np.ndarray:
        ys = []
        for sample in np.asarray(x, np.float32):
            feed = tflite._to_tflite_layout(sample[None], inp["shape"])
            interp.set_tensor(inp["index"], tflite._quantize(feed, inp))
            interp.invoke()
            ys.append(tflite._dequantize(interp.get_tensor(out["index"]), out)[0])
        return np.stack(ys)

    return run
