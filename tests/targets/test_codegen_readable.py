"""Generated C that people read and a compiler checks: buffers named after their ONNX
values, kernel parameters as named structs, the planned scratch checked against the C
macros at compile time, the memory plan drawn as text, and every generator fault an
EdgesmithError with its exit code."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from edgesmith.errors import EXIT_CONVERSION, EXIT_INPUT, ConversionError, UsageError
from edgesmith.targets import codegen
from edgesmith.targets.graph import Call, Graph, Ref, Step, Tensor
from edgesmith.targets.ir import lower
from edgesmith.targets.isa import VNNI
from edgesmith.targets.planner import Interval, Plan, plan, render_plan

# (model fixture, precision, isa, kernels) -> the scratch kernels it exercises
SCRATCH_CASES = {
    "fp32": ("digits_onnx", "fp32", frozenset(), "fast"),  # es_conv2d_f32_gemm, es_dwconv2d_f32
    "int8": ("digits_qdq", "int8", frozenset(), "fast"),  # es_conv2d_i8_gemm, _dw_hwc
    "int8-vnni": ("digits_qdq", "int8", VNNI, "fast"),  # es_conv2d_i8_dot, _cl, x_quads
    "int8-reference": ("digits_qdq", "int8", frozenset(), "reference"),  # es_conv2d_i8
}


def _syntax_errors(folder: Path) -> str:
    """The compiler's complaints about model.c alone ('' when it compiles)."""
    p = subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                        "-I", str(folder), str(folder / "model.c")],
                       capture_output=True, text=True, timeout=120)
    return "" if p.returncode == 0 else p.stderr + p.stdout


@pytest.mark.parametrize("case", list(SCRATCH_CASES))
def test_planned_scratch_is_checked_against_the_kernel_macros_at_compile_time(case, request,
                                                                              tmp_path):
    """model.c compiles with the plan as lowered; with every step's scratch one byte short
    of what its kernel's edgesmith_rt.h macro states, each of those steps fails to compile
    (so the Python sizes equal the C macros, kernel by kernel, on a real model). A step
    whose kernel needs none (a 1x1 conv reading quad planes) is checked as 0 >= 0."""
    fixture, precision, isa, kernels = SCRATCH_CASES[case]
    g = lower(request.getfixturevalue(fixture), precision, isa, kernels=kernels)
    checked = [i for i, st in enumerate(g.steps) if st.scratch and any(
        c.kernel is not None and c.kernel.scratch_c for c in st.calls)]
    assert checked
    codegen.generate(g, plan(g), tmp_path / "ok")
    assert _syntax_errors(tmp_path / "ok") == ""
    for i in checked:
        g.steps[i].scratch -= 1
    err = _syntax_errors(codegen.generate(g, plan(g), tmp_path / "short").out_dir)
    for i in checked:
        assert f"es_static_assert_step{i}_scratch" in err, (i, err[-2000:])


def test_shrunk_scratch_plan_fails_the_build_with_a_conversion_error(digits_qdq, tmp_path):
    from edgesmith.targets import run

    g = lower(digits_qdq, "int8")
    st = next(s for s in g.steps if s.scratch)
    st.scratch -= 64
    codegen.generate(g, plan(g), tmp_path / "c")
    with pytest.raises(ConversionError, match="es_static_assert_step") as e:
        run.build(tmp_path / "c")
    assert e.value.exit_code == EXIT_CONVERSION


def test_model_c_names_each_buffer_after_its_onnx_value(digits_qdq, tmp_path):
    g = lower(digits_qdq, "int8")
    gen = codegen.generate(g, plan(g), tmp_path / "c")
    text = (gen.out_dir / "model.c").read_text()
    names = codegen.buffer_names(g)
    assert len(set(names.values())) == len(names)
    for t, macro in names.items():
        base = "W" if g.tensors[t].kind == "const" else "A"
        off = r"\d+"
        if t in g.inputs:  # read through the model object: the arena slot, or es_bind_input's
            i = g.inputs.index(t)
            assert len(re.findall(rf"^#define {macro} \(\(unsigned char \*\)m->input\[{i}\]\) "
                                  rf"/\* .* at A \+ {off}, or bound \*/", text, re.M)) == 1, t
            continue
        assert len(re.findall(rf"^#define {macro} \({base} \+ {off}\) ", text, re.M)) == 1, t
    assert "#define T_input_QuantizeLinear_Output (A + " in text
    body = text.split("void es_run_step(")[1]
    # every pointer of every call is a named buffer or a step's scratch, never A + offset
    assert "(A + " not in body and "(W + " not in body
    assert re.search(r"\(int8_t \*\)T_\w+", body) and "SCRATCH_" in body


def test_model_c_passes_kernel_parameters_as_named_structs(digits_qdq, tmp_path):
    g = lower(digits_qdq, "int8")
    gen = codegen.generate(g, plan(g), tmp_path / "c")
    text = (gen.out_dir / "model.c").read_text()
    conv = next(st for st in g.steps if st.op == "Conv")
    pname = "P_" + re.sub("_+", "_", re.sub(r"\W", "_", conv.name)).strip("_")
    block = re.search(rf"static const es_conv_params {pname} = {{(.*?)}};", text, re.S)
    assert block, pname
    assert re.search(r"\.C = \d+, \.H = \d+, \.W = \d+, \.M = \d+", block.group(1))
    assert f"&{pname});" in text.split("void es_run_step(")[1]
    assert "static const es_conv_params P0_" not in text  # no positional P<step>_<call>


def test_buffer_names_are_c_identifiers_and_unique():
    ts = {n: Tensor(n, (1,), "f32") for n in ("a_b", "a__b", "_a_b", "t_1x", "out")}
    g = Graph(ts, [], [], [], [], [])
    names = codegen.buffer_names(g)
    assert names["a_b"] == "T_a_b" and names["out"] == "T_out"
    assert sorted(names.values()) == sorted({*names.values()})
    assert all(re.fullmatch(r"T_[A-Za-z0-9_]+", v) and "__" not in v for v in names.values())


def test_api_is_the_static_es_model_c_in_every_folder(digits_onnx, tmp_path):
    g = lower(digits_onnx)
    gen = codegen.generate(g, plan(g), tmp_path / "c")
    runtime = Path(codegen.__file__).parent / "runtime" / "es_model.c"
    assert (gen.out_dir / "es_model.c").read_bytes() == runtime.read_bytes()
    assert "es_model.c" in gen.sources
    text = (gen.out_dir / "model.c").read_text()
    assert "int es_init(" not in text and "int es_run_slice(" not in text


def test_plan_printout_draws_each_buffer_over_its_lifetime_and_bytes():
    ivs = [Interval("x", 0, 1, 128), Interval("y", 1, 2, 64), Interval("z", 2, 3, 128)]
    p = Plan({"x": 0, "y": 128, "z": 0}, 192, 192, 320, "greedy_by_size", 64, [], ivs,
             {"x": ["x"], "y": ["y", "y2"], "z": ["z"]})
    text = render_plan(p, width=12)
    lines = text.splitlines()
    assert "arena 192 B" in lines[0] and "lower bound 192 B" in lines[0]
    legend = {ln.split()[0]: ln.split() for ln in lines if re.match(r"^\s+[a-z]\s+\d", ln)}
    assert legend["a"][1:4] == ["0", "128", "0-1"] and legend["a"][4] == "x"
    assert legend["b"][1:4] == ["0", "128", "2-3"]  # z, same offset, later
    assert legend["c"][1:3] == ["128", "64"] and "y, y2" in " ".join(legend["c"][4:])
    rows = [ln for ln in lines if re.match(r"^\s+\d+\s{2}[a-z.]{12}", ln)]
    assert [r.split()[1] for r in rows] == ["aaaaaaaa....", "aaaaaaaacccc", "bbbbbbbbcccc",
                                            "bbbbbbbb...."]


def test_plan_txt_is_written_next_to_the_generated_code(digits_qdq, tmp_path):
    g = lower(digits_qdq, "int8")
    p = plan(g)
    gen = codegen.generate(g, p, tmp_path / "c")
    text = (gen.out_dir / "plan.txt").read_text()
    assert text == render_plan(p, g)
    assert f"arena {p.arena_bytes} B" in text
    for iv in p.intervals:
        assert re.search(rf"^\s+\S\s+{p.offsets[iv.name]}\s+{iv.size}\s+{iv.start}-{iv.end}\b",
                         text, re.M), iv
    assert all(st.name in text for st in g.steps)


# -- faults are EdgesmithErrors with the README's exit codes -------------------------------------
def _onnx(nodes, inputs, outputs, inits=()):
    from onnx import helper

    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, shape):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def test_bad_lowering_options_are_usage_errors(digits_onnx):
    for kw in ({"requant": "float"}, {"kernels": "fastest"}, {"precision": "int4"}):
        with pytest.raises(UsageError, match="must be one of") as e:
            lower(digits_onnx, **kw)
        assert e.value.exit_code == EXIT_INPUT


def test_a_node_the_lowering_trips_on_is_a_conversion_error_naming_it():
    from onnx import helper

    # MaxPool without kernel_shape: the pooling geometry cannot be computed
    m = _onnx([helper.make_node("MaxPool", ["x"], ["y"], name="pool_no_kernel")],
              [_vi("x", [1, 2, 4, 4])], [_vi("y", None)])
    with pytest.raises(ConversionError, match="pool_no_kernel") as e:
        lower(m)
    assert e.value.exit_code == EXIT_CONVERSION and e.value.where == "pool_no_kernel"


def test_a_value_without_producer_is_a_conversion_error():
    from onnx import helper

    m = _onnx([helper.make_node("Relu", ["ghost"], ["y"], name="r")], [_vi("x", [1, 4])],
              [_vi("y", None)])
    with pytest.raises(ConversionError, match="ghost") as e:
        lower(m)
    assert e.value.exit_code == EXIT_CONVERSION


def test_planner_overlap_is_a_conversion_error():
    from edgesmith.targets.planner import check

    with pytest.raises(ConversionError, match="share bytes") as e:
        check([Interval("a", 0, 2, 64), Interval("b", 1, 3, 64)], {"a": 0, "b": 32})
    assert e.value.exit_code == EXIT_CONVERSION


def _tiny_graph(call: Call) -> Graph:
    ts = {"x": Tensor("x", (4,), "f32", "input"), "y": Tensor("y", (4,), "f32", "output")}
    return Graph(ts, [Step("s", "Relu", ["x"], ["y"], [call])], ["x"], ["y"], ["x"], ["y"])


def test_codegen_faults_are_conversion_errors(tmp_path):
    g = _tiny_graph(Call("es_no_such_kernel", [Ref("x"), Ref("y"), 4]))
    with pytest.raises(ConversionError, match="es_no_such_kernel") as e:
        codegen.generate(g, plan(g), tmp_path / "a")
    assert e.value.exit_code == EXIT_CONVERSION
    g = _tiny_graph(Call("es_unary_f32", [Ref("x"), Ref("y"), object(), 0, 0.0, 0.0]))
    with pytest.raises(ConversionError, match="cannot render argument"):
        codegen.generate(g, plan(g), tmp_path / "b")

