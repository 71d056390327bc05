"""The int8 entry point (C option ``input: int8``, targets/int8_input.py): the input's
QuantizeLinear folded out, the caller passes int8. Through the real compiler, the model
gives the float-input model's output bit for bit, untiled and tiled; the arena holds no
float copy of the input, so tiling takes the arena further below the tensor-level bound."""

from __future__ import annotations

import numpy as np
import pytest

from edgesmith.errors import UsageError
from edgesmith.targets import codegen, run
from edgesmith.targets.int8_input import fold_input_quantize, folder_quantization, quantize
from edgesmith.targets.ir import lower
from edgesmith.targets.planner import plan
from edgesmith.targets.tiling import TiledStep, TilingForce
from tests.targets._tiling_nets import mbv2_style, quantized_pair

H, W = 45, 39
ADD2 = "/b4/Add"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("int8_input")
    fp32, qdq, rng = quantized_pair(mbv2_style(), (3, H, W), d, "mb", 3)
    return d, fp32, qdq, rng.standard_normal((2, 3, H, W)).astype(np.float32) * 1.5


@pytest.mark.parametrize("tiling", ["off", TilingForce(patches=3, split=ADD2)])
def test_int8_input_model_gives_the_float_input_models_output(models, tiling):
    d, _, qdq, x = models
    want = run.run(codegen.from_onnx(qdq, d / "float", precision="int8", tiling="off").out_dir, x)
    gen = codegen.from_onnx(qdq, d / "int8", precision="int8", tiling=tiling, input="int8")
    header = (d / "int8" / "model.h").read_text()
    assert f"/* input 0: int8_t [1, 3, {H}, {W}] */" in header
    assert f"#define ES_INPUT0_BYTES {3 * H * W}u" in header
    assert folder_quantization(d / "int8") is not None
    assert np.array_equal(run.run(gen.out_dir, x), want)  # run.run quantizes as the C did


def test_int8_input_arena_holds_no_float_input(models):
    _, _, qdq, _ = models
    g0 = lower(qdq, "int8")
    g = fold_input_quantize(g0)
    (name,) = g.inputs
    assert g.tensors[name].dtype == "i8" and g.tensors[name].kind == "input"
    assert all(t.dtype != "f32" or t.kind == "output" for t in g.tensors.values()
               if t.kind != "const")
    assert len(g.steps) == len(g0.steps) - 1 and g0.steps[0].op == "QuantizeLinear"
    from edgesmith.targets.tiling_search import apply

    _, tf = apply(g0, plan(g0), TilingForce(patches=3, split=ADD2))
    _, ti = apply(g, plan(g), TilingForce(patches=3, split=ADD2))
    # the float input (4 bytes a value) was live through the whole tiled segment
    assert tf.arena_bytes - ti.arena_bytes >= 4 * 3 * H * W - 3 * H * W


def test_tiled_int8_input_segment_starts_at_the_first_conv(models):
    _, _, qdq, _ = models
    from edgesmith.targets.tiling_search import apply

    g, _ = apply(g := fold_input_quantize(lower(qdq, "int8")), plan(g),
                 TilingForce(patches=2, split=ADD2))
    (st,) = [s for s in g.steps if isinstance(s, TiledStep)]
    assert not st.quantize_in and st.layers[0].op == "Conv"


def test_int8_input_on_a_float_build_is_a_usage_error(models):
    _, fp32, _, _ = models
    with pytest.raises(UsageError) as e:
        fold_input_quantize(lower(fp32, "fp32"))
    assert e.value.where == "options.input" and "input: float" in e.value.fix


def test_quantize_matches_the_c_kernels_rounding():
    """Half-way values round to even, out-of-range values clamp, as es_quantize_f32_i8."""
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1000.0, -1000.0], np.float32)
    assert quantize(x, 1.0, 0).tolist() == [0, 2, 2, 0, -2, 127, -128]
    assert quantize(x, 1.0, 3).tolist() == [3, 5, 5, 3, 1, 127, -128]
