"""Issue 18 item 5 (and item 4's options): each format brings its own device loader, the
uploaded script is assembled from them as one stdlib-only file, devices names no format,
and a target's options reach the device validated by its format."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import threading
import time
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from edgesmith import outdir
from edgesmith.devices import formats, remote, script
from edgesmith.devices.bench import BenchEvents, Device, bench
from edgesmith.errors import DeviceError, ProfileError
from edgesmith.profiles.schema import Profile
from edgesmith.target import Target
from tests.conftest import ROOT

SUFFIXES = (".onnx", ".tflite", ".xml", ".mlpackage", ".mlmodel")


def _constants(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_devices_names_no_format():
    names = set(formats.discover())
    assert {"onnx", "tflite", "openvino", "coreml", "c"} <= names
    found = [f"{path.relative_to(ROOT)}:{line}: {value!r}"
             for path in sorted((ROOT / "devices").glob("*.py"))
             for line, value in _constants(path)
             if value in names or value.endswith(SUFFIXES)]
    assert not found, "devices/ names formats:\n  " + "\n  ".join(found)


def _module_imports(tree: ast.Module) -> set[str]:
    out = set()
    for node in tree.body:  # module level only: runtimes are imported inside functions
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            out.add((node.module or "").split(".")[0])
    return out


@pytest.mark.parametrize("fmt", sorted(formats.discover()))
def test_every_format_has_a_stdlib_only_python38_device_loader(fmt):
    cls = formats.discover()[fmt]
    assert cls.device_loader is not None and Path(cls.device_loader).is_file()
    # the loader lives in its format's room, beside the format's module
    assert Path(cls.device_loader).parent == Path(sys.modules[cls.__module__].__file__).parent
    source = Path(cls.device_loader).read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    assert _module_imports(tree) <= set(sys.stdlib_module_names)
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert defined & {"load", "bench"}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Name)}
    assert {"RUNTIMES", "PACKAGE"} <= assigned


def test_the_assembled_script_is_one_python38_file_holding_every_loader(tmp_path):
    path = script.write(formats.discover(), tmp_path)
    text = path.read_text()
    tree = ast.parse(text, feature_version=(3, 8))
    assert script.MARK not in text
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not [m for m in imported if m and m.startswith("edgesmith")]
    (tmp_path / "files.json").write_text("{}")
    r = subprocess.run([sys.executable, "-I", str(path), "verify", "files.json"],
                       cwd=tmp_path, capture_output=True, text=True, check=True)
    doc = json.loads(r.stdout)
    assert doc["ok"] is True
    assert {"numpy", "onnxruntime", "ai-edge-litert", "openvino"} <= set(
        doc["system"]["runtimes"])


def test_a_loader_the_oldest_device_python_cannot_compile_is_refused(tmp_path):
    loader = tmp_path / "new_device.py"
    loader.write_text("def load(args, shape, rt):\n    match args:\n        case _:\n"
                      "            return None\n")
    unregistered = type("NewTarget", (Target,), {"device_loader": loader})  # no `format`
    with pytest.raises(DeviceError) as e:
        script.assemble({"new": unregistered})
    assert f"{loader}:" in e.value.what and "Pattern matching" in e.value.what
    assert "3.8" in e.value.fix


# -- ONNX on a device: the target's threads and graph optimisation ----------------------------
@pytest.fixture
def relu_onnx(tmp_path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "relu.onnx")
    return tmp_path / "relu.onnx"


def test_the_onnx_loader_sets_the_targets_threads_and_graph_optimisation(relu_onnx):
    import onnxruntime as ort

    from edgesmith.convert import onnx_device

    args = Namespace(model=str(relu_onnx), threads=2, options={"graph_optimization": "basic"})
    opts = onnx_device.session(args, remote.API).get_session_options()
    assert opts.intra_op_num_threads == 2
    assert opts.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC


def test_the_uploaded_script_benches_onnx_with_the_options_it_is_given(tmp_path, relu_onnx):
    path = script.write(formats.discover(), tmp_path)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "r.npy", np.maximum(x, 0))
    r = subprocess.run([sys.executable, str(path), "bench", "--format", "onnx",
                        "--model", str(relu_onnx), "--input", "x.npy", "--reference", "r.npy",
                        "--runs", "5", "--warmup", "1", "--threads", "2",
                        "--options", '{"threads": 2, "graph_optimization": "none"}'],
                       cwd=tmp_path, capture_output=True, text=True, check=True)
    doc = json.loads(r.stdout)
    assert doc["status"] == "ok", doc["message"]
    assert doc["threads"] == 2 and doc["options"]["graph_optimization"] == "none"
    assert doc["parity"]["max_abs_err"] == 0.0 and doc["runtime"]["name"] == "onnxruntime"


# -- options from the profiles, validated by the format -----------------------------------------
def _onnx_only(build: Path) -> Path:
    path = build / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["targets"] = [t for t in manifest["targets"] if t["name"] == "onnx-fp32"]
    path.write_text(json.dumps(manifest))
    return build


def _device_profile(cores: int, **onnx_options) -> Profile:
    return Profile.model_validate({
        "name": "dev",
        "device": {"name": "dev", "arch": "x86_64", "cores": cores, "ram_mb": 4096},
        "targets": [{"format": "onnx", "precision": "fp32", "options": onnx_options}]})


@pytest.mark.slow
def test_a_device_profiles_onnx_options_reach_the_device(demo_build):
    build = _onnx_only(demo_build)
    profile = _device_profile(3, threads=2, graph_optimization="basic")
    run = bench(build, [Device("dev", profile=profile)], runs=2, warmup=0)
    run.raise_for_status()
    (onnx,) = run.devices["dev"]["targets"]
    assert onnx["threads"] == 2  # the ONNX option is `threads`, not `num_threads`
    assert onnx["options"] == {"threads": 2, "graph_optimization": "basic"}
    # unset, the device's cores apply, as the README says
    run = bench(build, [Device("dev", profile=_device_profile(3))], runs=2, warmup=0)
    assert run.devices["dev"]["targets"][0]["threads"] == 3
    assert run.devices["dev"]["targets"][0]["options"]["graph_optimization"] == "all"


def test_an_option_the_format_refuses_stops_the_bench_before_any_device(demo_build):
    build = _onnx_only(demo_build)
    with pytest.raises(ProfileError) as e:
        bench(build, [Device("dev", profile=_device_profile(2, threads=0))], runs=1, warmup=0)
    assert e.value.exit_code == 2
    assert "device dev" in e.value.what and "onnx-fp32" in e.value.what
    assert "threads" in e.value.what and "graph_optimization" in e.value.fix
    assert not (build / "bench" / "dev.json").exists()


# -- the build folder's lock names its holder's job ----------------------------------------------
class _TryToBuild(BenchEvents):
    """While the bench holds the lock (its first target done), a build tries to take it."""

    def __init__(self, build: Path):
        self.build, self.waits, self.thread = build, [], None

    def target_done(self, device, result):
        if self.thread is None:
            self.thread = threading.Thread(target=self._build, daemon=True)
            self.thread.start()
            deadline = time.monotonic() + 10
            while not self.waits and time.monotonic() < deadline:
                time.sleep(0.05)

    def _build(self):
        with outdir.lock(self.build, on_wait=self.waits.append):  # as `edgesmith build`
            pass


@pytest.mark.slow
def test_a_build_waiting_for_a_bench_is_told_it_is_a_bench(demo_build):
    build = _onnx_only(demo_build)
    events = _TryToBuild(build)
    bench(build, [Device("local")], runs=2, warmup=0, events=events).raise_for_status()
    events.thread.join(30)
    assert not events.thread.is_alive()
    (message,) = events.waits
    assert message.startswith(f"waiting for the bench already running on {build.resolve()}")


def test_a_bench_waiting_for_a_build_is_told_it_is_a_build(tmp_path):
    waits: list[str] = []

    def take():
        with outdir.lock(tmp_path / "out", on_wait=waits.append, job="bench"):
            pass

    with outdir.lock(tmp_path / "out"):  # what `edgesmith build` holds
        t = threading.Thread(target=take, daemon=True)
        t.start()
        t.join(1)
        assert t.is_alive()  # it waits
    t.join(10)
    assert not t.is_alive()
    assert waits == [f"waiting for the build already writing {(tmp_path / 'out').resolve()} "
                     f"(pid {os.getpid()}) to finish"]
