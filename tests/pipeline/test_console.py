"""What a user reads on the console of `edgesmith build`, piped as CI and scripts pipe it:
real builds in a child process (the only place where what C++ libraries print to fds 1
and 2 can be seen), with stdout and stderr read back as text."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from tests.conftest import DIGITS_ARCH

EDGESMITH = str(Path(sys.executable).with_name("edgesmith"))

# onnx-fp16 of the scaled model is rejected (fp16 clamps a constant), onnx-fp32 is fine,
# and tflite-fp32 fails at once: its converter gets half a second
PROFILE = """\
extends: host
targets:
  - {format: onnx, precision: fp16}
  - {format: onnx, precision: fp32}
  - {format: tflite, precision: fp32, options: {timeout_s: 0.5}}
"""

# what absl, oneDNN, the CUDA stub, XNNPACK, coremltools and NNCF print by themselves
NOISE = re.compile(r"absl|oneDNN|cudart|cpu_feature_guard|XNNPACK|ERROR -|TensorFlow|"
                   r"MIL|PyTorch Frontend|Statistics collection|━")


def scaled_model(path: Path) -> Path:
    """relu(x * 1e5) * 1e-5 @ W on digits-shaped input: float16 clamps the 1e5 constant to
    65504, so its onnx-fp16 output is a third too small and rejected for parity."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = (np.random.default_rng(0).normal(size=(64, 10)) / 8).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(1e5, np.float32), "big"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "small"),
             numpy_helper.from_array(w, "W")]
    nodes = [helper.make_node("Mul", ["input", "big"], ["a"], name="scale_up"),
             helper.make_node("Relu", ["a"], ["a2"], name="relu"),
             helper.make_node("Mul", ["a2", "small"], ["b"], name="scale_down"),
             helper.make_node("Flatten", ["b"], ["flat"], name="flat"),
             helper.make_node("MatMul", ["flat", "W"], ["output"], name="fc")]
    graph = helper.make_graph(
        nodes, "scaled",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def _run(args: list[str], cache: Path, columns: int | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(EDGESMITH_CACHE=str(cache), TERM="dumb")
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run([EDGESMITH, *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    """The same build twice with one cache: the second takes every target from it, and
    runs with a 40-column COLUMNS, narrower than the targets table."""
    tmp = tmp_path_factory.mktemp("console")
    model = scaled_model(tmp / "scaled.onnx")
    (tmp / "p.yaml").write_text(PROFILE)
    out = tmp / "out"
    args = ["convert", model, "--profile", tmp / "p.yaml", "--out", out]
    first = _run(args, tmp / "cache")
    second = _run(args, tmp / "cache", columns=40)
    return out, first, second


def test_failed_and_rejected_targets_are_marked_failed_not_ticked(failing):
    _, first, _ = failing
    assert first.returncode == 4, first.stderr
    assert "✗ target onnx-fp16" in first.stderr and "✗ target tflite-fp32" in first.stderr
    assert "✓ target onnx-fp32" in first.stderr
    assert "✓ target onnx-fp16" not in first.stderr
    assert "✓ target tflite-fp32" not in first.stderr


def test_a_long_status_line_is_not_broken_at_80_columns(failing):
    _, first, _ = failing
    line = next(ln for ln in first.stderr.splitlines() if "onnx-fp16: output parity" in ln)
    assert "kept in rejected/onnx-fp16" in line, first.stderr


def test_cached_rejected_target_still_prints_its_status_line(failing):
    _, _, second = failing
    assert second.returncode == 4, second.stderr
    lines = second.stderr.splitlines()
    i = lines.index(next(ln for ln in lines if ln.startswith("✗ target onnx-fp16")))
    assert lines[i + 1].strip().startswith("onnx-fp16: output parity off")
    assert "(from cache)" in lines[i + 1]


def test_narrow_console_keeps_every_figure_of_the_table_whole(failing):
    out, _, second = failing
    manifest = json.loads((out / "manifest.json").read_text())
    rows = {ln.split()[0]: ln for ln in second.stdout.splitlines() if ln.strip()}
    for t in manifest["targets"]:
        row = rows[t["name"]]
        assert t["status"] in row.split(), row
        if t.get("size_bytes"):
            assert f"{t['size_bytes'] / 1024:.1f}" in row.split(), row
            assert f"{t['latency_ms_p50']:.3f}" in row.split(), row
    assert "…" not in second.stdout


def test_report_names_each_target_once_per_note(failing):
    out, _, _ = failing
    md = (out / "report.md").read_text()
    assert "- onnx-fp16: output parity off" in md
    assert "- tflite-fp32: convert: onnx2tf did not finish" in md
    assert "onnx-fp16: onnx-fp16:" not in md and "tflite-fp32: tflite-fp32:" not in md


def test_fix_lines_name_the_published_folder_not_the_staging_one(failing):
    out, _, _ = failing
    log = (out / "logs" / "tflite-fp32.log").read_text()
    assert f"fix: see {out.resolve()}/logs/tflite-fp32.log" in log, log
    for path in (out / "logs").iterdir():
        assert ".tmp-" not in path.read_text(), path


@pytest.mark.slow
def test_converter_and_runtime_chatter_goes_to_the_logs_not_the_console(digits_ckpt,
                                                                        tmp_path):
    out = tmp_path / "out"
    r = _run(["build", digits_ckpt, "--arch", DIGITS_ARCH, "--out", out, "-t", "onnx:fp32",
              "-t", "tflite:fp32", "-t", "coreml:fp16"], tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    noisy = [ln for ln in (r.stdout + r.stderr).splitlines() if NOISE.search(ln)]
    assert not noisy, "\n".join(noisy)
    # every stderr line is one of ours: a stage mark, an indented note, a warning
    ours = re.compile(r"^(✓ |✗ |  \S|warning: )")
    assert all(ours.match(ln) for ln in r.stderr.splitlines()), r.stderr
    assert "XNNPACK" in (out / "logs" / "tflite-fp32.log").read_text()
    assert "absl" in (out / "logs" / "coreml-fp16.log").read_text()


def test_table_wider_than_the_console_is_printed_whole():
    """8.7 MB and a 12-second latency on an 80-column pipe: rich would cut them to
    ``8716…``; the CLI prints the table at its own width instead."""
    from edgesmith.cli.render import print_whole, targets_table

    manifest = {"profile": {"name": "jetson-orin-nano"}, "targets": [
        {"name": "openvino-int8-per-tensor", "status": "rejected", "format": "openvino",
         "precision": "int8", "accuracy": 0.9944, "accuracy_drop": 0.0,
         "parity": {"max_abs_err": 0.28, "cosine": 0.99992}, "size_bytes": 8925492,
         "latency_ms_p50": 12345.678}]}
    buf = io.StringIO()
    console = Console(file=buf, width=80, highlight=False)
    print_whole(console, targets_table(manifest))
    row = next(ln for ln in buf.getvalue().splitlines() if "openvino" in ln)
    assert row.split() == ["openvino-int8-per-tensor", "rejected", "99.44%", "0.00",
                           "2.8e-01", "0.99992", "8716.3", "—", "12345.678"]
