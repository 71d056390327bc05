"""The C bench harness (edgesmith_bench, what a device runs) refuses numbers it cannot use
instead of quietly benching something else: built for real from a generated C folder."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import require_tools


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    """edgesmith_bench of a one-node model (Relu over 4 floats): seconds to generate and build."""
    import onnx
    from onnx import TensorProto, helper

    from edgesmith.targets import codegen, run

    require_tools("cc", "make")
    work = tmp_path_factory.mktemp("harness")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["input"], ["output"], name="relu")], "tiny",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, work / "relu.onnx")
    codegen.from_onnx(work / "relu.onnx", work / "c")
    return run.build(work / "c")


def _run(binary: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=60,
                          cwd=binary.parent)  # weights.bin is found there


@pytest.mark.parametrize("args, flag", [
    (["--runs", "-5"], "--runs"), (["--runs", "abc"], "--runs"), (["--runs", "0"], "--runs"),
    (["--runs", "12x"], "--runs"), (["--runs", ""], "--runs"),
    (["--runs", "99999999999999999999"], "--runs"),
    (["--warmup", "-1"], "--warmup"), (["--warmup", "two"], "--warmup"),
    (["--slice", "-1"], "--slice"), (["--slice", "1.5"], "--slice"),
    (["--sleep-us", "-1"], "--sleep-us"), (["--sleep-us", "5000000000"], "--sleep-us"),
])
def test_a_number_the_harness_cannot_use_is_a_usage_error(harness, args, flag):
    r = _run(harness, *args)
    assert r.returncode == 2, (args, r.stdout, r.stderr)
    assert f"error: {flag} {args[1]!s}" in r.stderr and "usage:" in r.stderr
    assert r.stdout == ""  # no JSON line: nothing was measured


def test_good_numbers_still_bench(harness):
    r = _run(harness, "--runs", "3", "--warmup", "0", "--slice", "1", "--sleep-us", "0")
    assert r.returncode == 0, r.stderr
    assert '"runs": 3' in r.stdout and '"slice": 1' in r.stdout


def test_a_flag_without_its_value_is_a_usage_error(harness):
    r = _run(harness, "--runs")
    assert r.returncode == 2 and "usage:" in r.stderr
