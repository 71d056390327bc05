"""The C runtime's GRU (targets/lower/gru.py, kernels/gru_f32.c) against onnxruntime.

One-node GRU models on odd shapes (hidden 7, input 5, batch 2, T 1 and 13; both
linear_before_reset values; with and without initial_h; forward, reverse, bidirectional;
reading Y or Y_h), each through the default kernel (projections by es_gemm_f32) and the
plain-loop reference; the conv+GRU keyword-spotting net (examples/zoo/kws_gru.py, reduced,
random weights) in FP32 and INT8 (the GRU stays float between the Q/DQ steps); and the
refusals, which the op-compat table must agree with.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgesmith.convert.compat import _attrs
from edgesmith.errors import UnsupportedOpError
from edgesmith.targets import codegen, run
from edgesmith.targets.c_target import CTarget
from edgesmith.targets.ir import lower
from edgesmith.targets.planner import plan
from tests.targets._helpers import ROOT, _qdq, export, generate, ort_run, output_scale

T_IN, N_BATCH, HIDDEN = 5, 2, 7


def _gru_model(path: Path, t: int, *, lbr: int = 1, h0: bool = False,
               direction: str = "forward", read: str = "Y", seed: int = 0,
               **attrs) -> Path:
    """input X [t, 2, 5] -> one GRU (hidden 7) -> output (its Y or its Y_h)."""
    rng = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    inits = {"W": rng.standard_normal((d, 3 * HIDDEN, T_IN)).astype(np.float32) * 0.5,
             "R": rng.standard_normal((d, 3 * HIDDEN, HIDDEN)).astype(np.float32) * 0.5,
             "B": rng.standard_normal((d, 6 * HIDDEN)).astype(np.float32) * 0.5}
    ins = ["input", "W", "R", "B"]
    if h0:  # sequence_lens absent, then initial_h
        inits["h0"] = rng.standard_normal((d, N_BATCH, HIDDEN)).astype(np.float32)
        ins += ["", "h0"]
    outs, shape = (["output", ""], [t, d, N_BATCH, HIDDEN]) if read == "Y" else \
        (["", "output"], [d, N_BATCH, HIDDEN])
    node = helper.make_node("GRU", ins, outs,
                            name="the_gru", hidden_size=HIDDEN, linear_before_reset=lbr,
                            direction=direction, **attrs)
    g = helper.make_graph([node], "gru",
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                         [t, N_BATCH, T_IN])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    onnx.save(m, str(path))
    return path


def _generate(src: Path, out: Path, kernels: str) -> Path:
    """Generate and build ``src`` with the ``kernels`` set (fast or reference)."""
    if out.exists():
        shutil.rmtree(out)
    g = lower(src, kernels=kernels)
    codegen.generate(g, plan(g), out, name="gru")
    run.build(out)
    return out


# T, linear_before_reset, initial_h, direction, output read
CASES = [(1, 0, False, "forward", "Y"), (1, 1, True, "forward", "Y_h"),
         (13, 0, True, "forward", "Y"), (13, 1, False, "forward", "Y"),
         (13, 1, True, "reverse", "Y"), (13, 0, False, "reverse", "Y_h"),
         (13, 0, True, "bidirectional", "Y"), (13, 1, False, "bidirectional", "Y_h")]


@pytest.mark.parametrize(("t", "lbr", "h0", "direction", "read"), CASES)
def test_gru_kernel_matches_onnxruntime_and_its_reference_on_odd_shapes(
        tmp_path, t, lbr, h0, direction, read):
    path = _gru_model(tmp_path / "gru.onnx", t, lbr=lbr, h0=h0, direction=direction,
                      read=read)
    x = np.random.default_rng(1).standard_normal((t, N_BATCH, T_IN)).astype(np.float32)
    ref = ort_run(path, x)
    fast = run.run(_generate(path, tmp_path / "fast", "fast"), x)
    plain = run.run(_generate(path, tmp_path / "ref", "reference"), x)
    assert fast.shape == ref.shape == plain.shape
    assert np.abs(fast - ref).max() <= 1e-5, np.abs(fast - ref).max()
    assert np.abs(plain - ref).max() <= 1e-5, np.abs(plain - ref).max()
    assert np.abs(fast - plain).max() <= 1e-5


@pytest.fixture(scope="module")
def kws_onnx(tmp_path_factory) -> Path:
    """examples/zoo/kws_gru.py reduced (6 features, hidden 7, 5 classes), random weights,
    exported as the pipeline exports (dynamic batch): two GRU nodes with the Transpose,
    Slice and Squeeze torch puts around them."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "zoo"))
    try:
        import kws_gru
    finally:
        sys.path.pop(0)
    model = kws_gru.build(num_classes=5, features=6, hidden=7, layers=2, seed=1)
    path = export(model, torch.zeros(1, 6, 11), tmp_path_factory.mktemp("kws") / "kws.onnx")
    assert [n.name for n in onnx.load(str(path)).graph.node if n.op_type == "GRU"] == \
        ["/gru/GRU", "/gru/GRU_1"]
    return path


def _kws_x(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 6, 11)).astype(np.float32)


def test_kws_gru_fp32_matches_onnxruntime(kws_onnx, tmp_path):
    for n in onnx.load(str(kws_onnx)).graph.node:  # the compat table lets it build ...
        assert CTarget().compat(n.op_type, _attrs(n), "fp32").status != "unsupported", n.name
    x = _kws_x(3, seed=0)  # ... and it computes what onnxruntime does
    y, ref = run.run(generate(kws_onnx, tmp_path / "c"), x), ort_run(kws_onnx, x)
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()


def test_kws_gru_int8_equals_onnxruntime_op_by_op(kws_onnx, tmp_path):
    qdq = _qdq(kws_onnx, _kws_x(16, seed=1), tmp_path / "kws_qdq.onnx")
    m = onnx.load(str(qdq))
    producers = {o: n.op_type for n in m.graph.node for o in n.output}
    grus = [n for n in m.graph.node if n.op_type == "GRU"]
    # onnxruntime's static quantizer leaves the GRU float: float weights, no Q/DQ on them
    assert len(grus) == 2 and all(producers.get(i) is None for n in grus for i in n.input[1:4])
    x = _kws_x(8, seed=2)
    y = run.run(generate(qdq, tmp_path / "c_int8", precision="int8"), x)
    assert np.array_equal(y, ort_run(qdq, x, "ORT_ENABLE_BASIC"))
    assert np.abs(y - ort_run(qdq, x)).max() <= output_scale(qdq) * 1.001


# attributes the kernel does not compute -> a word the refusal must name
REFUSED = [({"clip": 2.0}, "clip=2.0"),
           ({"activations": ["Sigmoid", "Relu"]}, "activations"),
           ({"layout": 1}, "layout=1")]


@pytest.mark.parametrize(("attrs", "named"), REFUSED)
def test_gru_attribute_the_kernel_lacks_is_refused_naming_node_and_attribute(
        tmp_path, attrs, named):
    path = _gru_model(tmp_path / "gru.onnx", 4, **attrs)
    node = onnx.load(str(path)).graph.node[0]
    rule = CTarget().compat("GRU", _attrs(node), "fp32")
    assert rule.status == "unsupported" and named in rule.hint
    with pytest.raises(UnsupportedOpError) as e:
        lower(path)
    assert e.value.where == "the_gru" and named in str(e.value)


def test_gru_compat_rule_supported_is_what_the_conversion_gives(tmp_path):
    """The default GRU: the table says supported and the C conversion matches
    onnxruntime (the per-case numerics are the odd-shapes test's)."""
    path = _gru_model(tmp_path / "gru.onnx", 3, lbr=0)
    node = onnx.load(str(path)).graph.node[0]
    assert CTarget().compat("GRU", _attrs(node), "fp32").status == "supported"
    x = np.random.default_rng(3).standard_normal((3, N_BATCH, T_IN)).astype(np.float32)
    y = run.run(generate(path, tmp_path / "c"), x)
    assert np.abs(y - ort_run(path, x)).max() <= 1e-5


def test_gru_with_shorter_sequence_lens_is_refused(tmp_path):
    path = _gru_model(tmp_path / "gru.onnx", 4)
    m = onnx.load(str(path))
    m.graph.initializer.append(numpy_helper.from_array(np.array([4, 2], np.int32), "lens"))
    m.graph.node[0].input[:] = [*m.graph.node[0].input[:4], "lens"]
    with pytest.raises(UnsupportedOpError) as e:
        lower(m)
    assert e.value.where == "the_gru" and "sequence_lens [4, 2]" in str(e.value)


def test_gru_initial_h_computed_at_run_time_is_read_from_its_buffer(tmp_path):
    """initial_h from the input (X[0] . M, reshaped to [1, 2, 7]): the kernel reads the
    activation, not zeros."""
    rng = np.random.default_rng(4)
    path = _gru_model(tmp_path / "gru.onnx", 6, lbr=0)
    m = onnx.load(str(path))
    m.graph.initializer.extend([
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(rng.standard_normal((T_IN, HIDDEN)).astype(np.float32), "M"),
        numpy_helper.from_array(np.array([1, N_BATCH, HIDDEN], np.int64), "h0_shape")])
    gru = m.graph.node.pop()
    gru.input[:] = [*gru.input[:4], "", "h0"]  # before extend(), which copies the node
    m.graph.node.extend([
        helper.make_node("Gather", ["input", "zero"], ["x0"], name="first_step", axis=0),
        helper.make_node("MatMul", ["x0", "M"], ["h0_flat"], name="h0_proj"),
        helper.make_node("Reshape", ["h0_flat", "h0_shape"], ["h0"], name="h0_reshape"), gru])
    assert list(m.graph.node[-1].input) == ["input", "W", "R", "B", "", "h0"]
    onnx.save(m, str(path))
    x = rng.standard_normal((6, N_BATCH, T_IN)).astype(np.float32)
    y = run.run(generate(path, tmp_path / "c"), x)
    assert np.abs(y - ort_run(path, x)).max() <= 1e-5


def test_kws_gru_allocates_nothing_after_init(kws_onnx, tmp_path):
    """malloc_count.c preloaded into the host harness: 0 allocations over 20 runs (the GRU
    scratch is planned in the arena)."""
    import json
    import subprocess

    from tests.targets._helpers import HARNESS, compile_harness

    folder = generate(kws_onnx, tmp_path / "c")
    shim = tmp_path / "malloc_count.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(shim),
                    str(HARNESS / "malloc_count.c")], check=True)
    h = compile_harness(folder, folder / "harness_noalloc")
    p = subprocess.run([str(h), "noalloc", "20"], capture_output=True, text=True, cwd=folder,
                       timeout=300, env={"LD_PRELOAD": str(shim), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"allocations": 0, "runs": 20,
                                                             "same": 1}


def test_kws_gru_cross_built_for_aarch64_matches_onnxruntime_under_qemu(kws_onnx, tmp_path):
    """Kernels chosen for aarch64 (es_gemm_f32's NEON path under the GRU), run by
    qemu-aarch64."""
    from tests.conftest import require_tools

    cc, qemu = "aarch64-linux-gnu-gcc", ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"]
    require_tools(cc, qemu[0])
    out = tmp_path / "a64"
    codegen.from_onnx(kws_onnx, out, deploy_cc=cc, deploy_cflags="-O3")
    run.build(out, cc=cc, cflags="-O3")
    x = _kws_x(2, seed=5)
    y = run.run(out, x, binary=out / "edgesmith_bench", wrapper=qemu)
    ref = ort_run(kws_onnx, x)
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()
