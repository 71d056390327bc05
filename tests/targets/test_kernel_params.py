"""Kernel parameters in model.c are named structs, never rows of bare numbers (issue 18 item
7): every kernel call passes at most three numbers, the rest in a static const block named
after its ONNX node with one designated initialiser per field; and the kernels that take
those blocks compute what onnxruntime computes, so no field was wired to the wrong place."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgesmith.targets import codegen, run
from edgesmith.targets.ir import lower
from edgesmith.targets.isa import VNNI
from edgesmith.targets.planner import plan
from tests.targets._helpers import compile_harness, generate, ort_run

NUMBER = re.compile(r"-?(\d+\.?\d*(e[-+]?\d+)?f|\d+[uUlL]*)")


def kernel_calls(model_c: str) -> list[tuple[str, list[str]]]:
    """(function, arguments as written) of every call in es_run_step."""
    body = model_c.split("void es_run_step(")[1]
    calls = []
    for m in re.finditer(r"\b(es_\w+)\(", body):
        depth, args, cur = 1, [], ""
        for ch in body[m.end():]:
            depth += (ch == "(") - (ch == ")")
            if depth == 0 or (ch == "," and depth == 1):
                args.append(cur.strip())
                cur = ""
                if depth == 0:
                    break
            else:
                cur += ch
        calls.append((m.group(1), args))
    return calls


def param_blocks(model_c: str) -> dict[str, str]:
    """Name -> initialisers (on one line) of every parameter block in model.c."""
    return {name: " ".join(body.split()) for name, body in re.findall(
        r"static const es_\w+ (P_\w+) = {(.*?)};", model_c, re.S)}


def bare_numbers(args: list[str]) -> list[str]:
    return [a for a in args if NUMBER.fullmatch(a)]


def test_kernel_calls_parse_into_functions_and_arguments():
    text = ("void es_run_step(es_model *m, int i) {\n    case 0:\n"
            "        es_fc_i8((int8_t *)T_x, (const int8_t *)(T_w + 4), 1, 10, 64, -128, "
            "-53, -128, 127, 1);\n        es_copy(T_y, T_x, 40u);\n"
            "        es_quantize_f32_i8((float *)T_a, (int8_t *)T_b, 64, 0.0078f, 1.5e-05f);\n")
    calls = kernel_calls(text)
    assert [fn for fn, _ in calls] == ["es_fc_i8", "es_copy", "es_quantize_f32_i8"]
    assert calls[0][1][1] == "(const int8_t *)(T_w + 4)"
    assert len(bare_numbers(calls[0][1])) == 8
    assert bare_numbers(calls[1][1]) == ["40u"]
    assert bare_numbers(calls[2][1]) == ["64", "0.0078f", "1.5e-05f"]


# (model fixture, precision, the deploying compiler's ISA)
MODELS = {"digits-fp32": ("digits_onnx", "fp32", frozenset()),
          "digits-int8": ("digits_qdq", "int8", frozenset()),
          "digits-int8-vnni": ("digits_qdq", "int8", VNNI),
          "mnv2-fp32": ("mnv2_onnx", "fp32", frozenset()),
          "mnv2-int8": ("mnv2_qdq", "int8", frozenset()),
          "mnv2-int8-vnni": ("mnv2_qdq", "int8", VNNI)}


@pytest.mark.parametrize("case", list(MODELS))
def test_no_kernel_call_passes_more_than_three_bare_numbers(case, request, tmp_path):
    fixture, precision, isa = MODELS[case]
    g = lower(request.getfixturevalue(fixture), precision, isa)
    text = (codegen.generate(g, plan(g), tmp_path / "c").out_dir / "model.c").read_text()
    calls = kernel_calls(text)
    assert len(calls) >= len(g.steps)
    crowded = [(fn, args) for fn, args in calls if len(bare_numbers(args)) > 3]
    assert not crowded, crowded
    # the dense layer, the last one of both models, passes its block by name
    fc = "es_fc_i8" if precision == "int8" else "es_gemm_f32"
    struct = "es_fc_params" if precision == "int8" else "es_gemm_params"
    dims = r"\.M = 1, \.N = 10, \.K = \d+"
    if precision == "int8" and isa:  # VNNI: each row a 1x1 conv in es_conv2d_i8_cl (int8.py)
        fc, struct, dims = "es_conv2d_i8_cl", "es_conv_params", r"\.H = 1, \.W = 1, \.M = 10,"
    blocks = re.findall(rf"static const {struct} (P_\w+) = {{(.*?)}};", text, re.S)
    names = [name for name, body in blocks if re.search(dims, body)]
    assert names and any(fn == fc and args[-1] == "&" + names[-1] for fn, args in calls)


def _op_zoo(path: Path) -> Path:
    """Every fp32 kernel beyond conv, pooling and binary ops on one path: Resize (nearest
    and linear), LRN, Split and Concat (swapped) along rows of several channels,
    Transpose, a batched run-time MatMul, Softmax, LogSoftmax, ReduceMean / ReduceMax,
    Gemm + Relu, Sigmoid, LeakyRelu. Shapes where a swapped field changes the result:
    copies of 4 rows with different strides, 2 matmul batches with operands of different
    strides, reductions over axes with elements before and after."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)

    def const(name, v):
        return numpy_helper.from_array(np.asarray(v), name)

    inits = [const("scales", np.array([1, 1, 2, 3], np.float32)),
             const("sizes", np.array([1, 4, 12, 24], np.int64)),
             const("split", np.array([5, 7], np.int64)),
             const("a_shape", np.array([2, 12, 48], np.int64)),
             const("b_shape", np.array([2, 2, 48], np.int64)),
             const("flat", np.array([1, 48], np.int64)),
             const("flat_rm", np.array([1, 24], np.int64)),
             const("flat_rx", np.array([1, 4], np.int64)),
             const("gw", rng.normal(0, 0.3, (48, 8)).astype(np.float32)),
             const("gb", rng.normal(0, 0.1, 8).astype(np.float32))]
    n = helper.make_node
    nodes = [
        n("Resize", ["x", "", "scales"], ["r1"], name="up_nearest", mode="nearest",
          coordinate_transformation_mode="asymmetric", nearest_mode="ceil"),
        n("Resize", ["x", "", "", "sizes"], ["r2"], name="up_linear", mode="linear",
          coordinate_transformation_mode="align_corners"),
        n("Add", ["r1", "r2"], ["s"], name="add"),
        n("LRN", ["s"], ["l"], name="lrn", size=3, alpha=0.5, beta=0.75, bias=2.0),
        n("Split", ["l", "split"], ["a", "b"], name="split", axis=2),
        n("Concat", ["b", "a"], ["c"], name="concat", axis=2),
        n("Sigmoid", ["c"], ["sg"], name="sigmoid"),
        n("Reshape", ["sg", "a_shape"], ["ma"], name="flatten"),
        n("Reshape", ["x", "b_shape"], ["xb"], name="flatten_x"),
        n("Transpose", ["xb"], ["mb"], name="transpose", perm=[0, 2, 1]),
        n("MatMul", ["ma", "mb"], ["mm"], name="matmul"),
        n("Mul", ["mm", "k"], ["mms"], name="scale"),
        n("Softmax", ["mms"], ["sm"], name="softmax", axis=-1),
        n("LogSoftmax", ["mms"], ["lsm"], name="logsoftmax", axis=1),
        n("Add", ["sm", "lsm"], ["t"], name="add2"),
        n("ReduceMean", ["t"], ["rm"], name="reduce_mean", axes=[2], keepdims=0),
        n("ReduceMax", ["t"], ["rx"], name="reduce_max", axes=[1], keepdims=0),
        n("Reshape", ["t", "flat"], ["tf"], name="flatten2"),
        n("Reshape", ["rm", "flat_rm"], ["rm2"], name="flatten3"),
        n("Reshape", ["rx", "flat_rx"], ["rx2"], name="flatten4"),
        n("Gemm", ["tf", "gw", "gb"], ["g"], name="dense"),
        n("Relu", ["g"], ["gr"], name="relu"),
        n("LeakyRelu", ["tf"], ["lk"], name="leaky", alpha=0.2),
        n("Concat", ["lk", "rm2", "rx2", "gr"], ["y"], name="gather", axis=1),
    ]
    inits.append(const("k", np.array(0.5, np.float32)))
    graph = helper.make_graph(nodes, "op_zoo",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 84])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_op_zoo_passes_named_blocks_and_matches_onnxruntime(tmp_path):
    src = _op_zoo(tmp_path / "zoo.onnx")
    out = generate(src, tmp_path / "c")
    text = (out / "model.c").read_text()
    calls = kernel_calls(text)
    fns = {fn for fn, _ in calls}
    assert {"es_resize2d_f32", "es_lrn_f32", "es_copy_rows", "es_matmul_f32", "es_softmax_f32",
            "es_reduce_f32", "es_gemm_f32", "es_unary_f32"} <= fns
    assert not [(fn, a) for fn, a in calls if len(bare_numbers(a)) > 3]
    # one block per call, named after the node, constants by name
    blocks = param_blocks(text)
    assert ".mode = ES_RESIZE_LINEAR, .coord = ES_COORD_ALIGN_CORNERS," in blocks["P_up_linear"]
    assert (".coord = ES_COORD_ASYMMETRIC, .nearest = ES_NEAREST_CEIL,"
            in blocks["P_up_nearest"])
    assert blocks["P_lrn"].startswith(".C = 4, .inner = 288, .size = 3, .alpha = 0.5f,")
    assert blocks["P_concat"] == (".rows = 4, .row_bytes = 672, .dst_stride = 1152, "
                                  ".src_stride = 672,")
    assert blocks["P_matmul"] == (".batch = 2, .M = 12, .K = 48, .N = 2, .a_stride = 576, "
                                  ".b_stride = 96,")
    assert blocks["P_sigmoid"] == ".n = 1152, .op = ES_U_SIGMOID, .p0 = 0.0f, .p1 = 0.0f,"
    assert ".act = ES_ACT_RELU," in blocks["P_dense"]
    assert blocks["P_logsoftmax"] == ".outer = 2, .n = 12, .inner = 2, .is_log = 1,"
    assert blocks["P_reduce_max"] == ".outer = 2, .n = 12, .inner = 2, .op = ES_R_MAX,"
    x = np.random.default_rng(3).normal(size=(1, 4, 6, 8)).astype(np.float32)
    y, ref = run.run(out, x), ort_run(src, x)
    assert y.shape == ref.shape == (1, 84)
    assert np.abs(y - ref).max() <= 1e-4 * np.abs(ref).max(), (y, ref)


def _requant_model(path: Path) -> Path:
    """Q -> DQ -> Clip -> Q (a clamped requantisation, es_requant_i8) -> DQ -> Q with a new
    scale and zero point (a plain one) -> DQ."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def c(name, v, dt):
        return numpy_helper.from_array(np.array(v, dtype=dt), name)

    inits = [c("s1", 0.02, np.float32), c("z1", 3, np.int8), c("s2", 0.013, np.float32),
             c("z2", -20, np.int8), c("s3", 0.031, np.float32), c("z3", 7, np.int8),
             c("lo", 0.0, np.float32), c("hi", 1.5, np.float32)]
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "s1", "z1"], ["q1"], name="q1"),
             n("DequantizeLinear", ["q1", "s1", "z1"], ["d1"], name="d1"),
             n("Clip", ["d1", "lo", "hi"], ["r"], name="clip"),
             n("QuantizeLinear", ["r", "s2", "z2"], ["q2"], name="q2"),
             n("DequantizeLinear", ["q2", "s2", "z2"], ["d2"], name="d2"),
             n("QuantizeLinear", ["d2", "s3", "z3"], ["q3"], name="q3"),
             n("DequantizeLinear", ["q3", "s3", "z3"], ["y"], name="d3")]
    graph = helper.make_graph(nodes, "rq",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 37])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 37])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_requantising_copies_pass_named_blocks_and_match_onnxruntime(tmp_path):
    src = _requant_model(tmp_path / "rq.onnx")
    out = generate(src, tmp_path / "c", precision="int8")
    text = (out / "model.c").read_text()
    calls = kernel_calls(text)
    assert [a[-1] for fn, a in calls if fn == "es_requant_i8"] == ["&P_clip", "&P_q3"]
    blocks = param_blocks(text)
    assert re.fullmatch(r"\.n = 148, \.x_zp = 3, \.y_zp = -20, \.mult = \d+, \.shift = -?\d+, "
                        r"\.qmin = -20, \.qmax = 95,", blocks["P_clip"]), blocks["P_clip"]
    assert re.fullmatch(r"\.n = 148, \.x_zp = -20, \.y_zp = 7, \.mult = \d+, \.shift = -?\d+, "
                        r"\.qmin = -128, \.qmax = 127,", blocks["P_q3"]), blocks["P_q3"]
    x = np.random.default_rng(1).uniform(-3, 3, (1, 4, 37)).astype(np.float32)
    # every node as written (optimised, onnxruntime folds Q -> DQ pairs away)
    y, ref = run.run(out, x), ort_run(src, x, "ORT_DISABLE_ALL")
    err = np.abs(y - ref) / 0.031
    assert err.max() <= 1.001 and float((err < 0.01).mean()) >= 0.95, err.max()


@pytest.mark.slow
def test_op_zoo_and_requantising_copies_run_clean_under_asan_and_ubsan(tmp_path):
    """The blocks' sizes and strides keep every kernel inside its buffers: both models,
    built with AddressSanitizer and UBSan, run whole and in resumable slices of 4 steps."""
    zoo = generate(_op_zoo(tmp_path / "zoo.onnx"), tmp_path / "zoo")
    rq = generate(_requant_model(tmp_path / "rq.onnx"), tmp_path / "rq", precision="int8")
    for folder in (zoo, rq):
        h = compile_harness(folder, folder / "harness_san", [
            "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
        p = subprocess.run([str(h), "slice", "4"], capture_output=True, text=True, cwd=folder,
                           timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        assert json.loads(p.stdout)["same"] == 1
