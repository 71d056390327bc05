"""INT8 Add / Sub / Mul with NumPy broadcasting run as integer kernels.

Models: hand-built QDQ graphs (one op between Q/DQ pairs, asymmetric zero points), the
second operand an int8 constant under DequantizeLinear or a smaller activation (a
ReduceMax of the input, exact in both runtimes, quantized on its own scale). The
generated C must call the integer kernel and land within 1 LSB of onnxruntime.
Kernels: es_add_i8_bcast and es_mul_i8 (fast and reference forms) against a plain
per-element reference on random shapes, for every build flavour."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from edgesmith.targets import run
from tests.targets._helpers import generate, ort_run, output_scale
from tests.targets.test_int8_fast import FLAVOURS

RT = Path(__file__).parents[2] / "targets" / "runtime"
CHECK = Path(__file__).parent / "c" / "bcast_check.c"


# -- models -----------------------------------------------------------------------------------
def _qparams(v: np.ndarray) -> tuple[float, int]:
    """Asymmetric int8 (scale, zero point) covering v and 0, as a calibrator would."""
    lo, hi = min(float(v.min()), 0.0), max(float(v.max()), 0.0)
    scale = max(hi - lo, 1e-3) / 255.0
    return scale, int(np.clip(round(-128 - lo / scale), -128, 127))


def _quantize(v: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return np.clip(np.rint(v / scale) + zp, -128, 127).astype(np.int8)


def _dequantize(q: np.ndarray, scale: float, zp: int) -> np.ndarray:
    return (q.astype(np.float32) - zp) * np.float32(scale)


def _model(path: Path, x: np.ndarray, op: str, a_spec, b_spec, act: str | None = None,
           seed: int = 0) -> Path:
    """input -> Q/DQ -> ``op``(a, b) [-> act] -> Q/DQ -> output. A spec is "input",
    ("reduce", axes, keepdims) (a ReduceMax of the input, then its own Q/DQ), or
    ("const", shape) (random int8 data under a DQ with its own scale and zero point), or
    ("const_per_axis", shape, axis) (per-channel scales: not lowered to integers)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def qdq(name: str, value: np.ndarray) -> tuple[str, np.ndarray]:
        s, z = _qparams(value)
        inits.extend([numpy_helper.from_array(np.array(s, np.float32), f"{name}_s"),
                      numpy_helper.from_array(np.array(z, np.int8), f"{name}_z")])
        nodes.append(helper.make_node("QuantizeLinear", [name, f"{name}_s", f"{name}_z"],
                                      [f"{name}_q"], name=f"{name}_quant"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s",
                                                            f"{name}_z"], [f"{name}_dq"],
                                      name=f"{name}_dequant"))
        return f"{name}_dq", _dequantize(_quantize(value, s, z), s, z)

    x_dq, x_val = qdq("input", x)

    def operand(spec, tag: str) -> tuple[str, np.ndarray]:
        if spec == "input":
            return x_dq, x_val
        if spec[0] == "reduce":
            _, axes, keep = spec
            nodes.append(helper.make_node("ReduceMax", ["input"], [tag], name=f"{tag}_reduce",
                                          axes=axes, keepdims=keep))
            return qdq(tag, np.max(x, axis=tuple(axes), keepdims=bool(keep)))
        q = rng.integers(-128, 128, size=spec[1]).astype(np.int8)
        if spec[0] == "const":
            s, z = float(rng.uniform(0.002, 0.02)), int(rng.integers(-20, 20))
            sv, zv = np.array(s, np.float32), np.array(z, np.int8)
            val = _dequantize(q, s, z)
            attrs = {}
        else:  # per-axis scales along spec[2]
            axis, n = spec[2], spec[1][spec[2]]
            sv = rng.uniform(0.002, 0.02, size=n).astype(np.float32)
            zv = np.zeros(n, np.int8)
            shape = [1] * q.ndim
            shape[axis] = n
            val = q.astype(np.float32) * sv.reshape(shape)
            attrs = {"axis": axis}
        inits.extend([numpy_helper.from_array(q, f"{tag}_q"),
                      numpy_helper.from_array(sv, f"{tag}_s"),
                      numpy_helper.from_array(zv, f"{tag}_z")])
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", f"{tag}_s", f"{tag}_z"],
                                      [f"{tag}_dq"], name=f"{tag}_dequant", **attrs))
        return f"{tag}_dq", val

    (a, av), (b, bv) = operand(a_spec, "opa"), operand(b_spec, "opb")
    yv = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op](av, bv)
    nodes.append(helper.make_node(op, [a, b], ["y"], name=f"{op.lower()}0"))
    y = "y"
    if act == "Relu":
        nodes.append(helper.make_node("Relu", ["y"], ["y_act"], name="relu0"))
        y, yv = "y_act", np.maximum(yv, 0)
    y_dq, _ = qdq(y, yv)
    nodes.append(helper.make_node("Identity", [y_dq], ["output"], name="out"))
    g = helper.make_graph(nodes, "bcast", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, list(x.shape))], [helper.make_tensor_value_info(
            "output", TensorProto.FLOAT, list(yv.shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


NCHW = (2, 8, 6, 37)
CASES = {  # name: (op, input shape, a, b[, activation])
    "nchw_plus_1c11_const": ("Add", NCHW, "input", ("const", (1, 8, 1, 1))),
    "nchw_plus_nc11_act": ("Add", NCHW, "input", ("reduce", [2, 3], 1)),
    "nchw_plus_scalar_const": ("Add", NCHW, "input", ("const", ())),
    "nchw_plus_w_act": ("Add", NCHW, "input", ("reduce", [0, 1, 2], 0)),
    "nchw_plus_n1hw_act": ("Add", NCHW, "input", ("reduce", [1], 1)),
    "nc11_plus_n1hw_outer": ("Add", NCHW, ("reduce", [2, 3], 1), ("reduce", [1], 1)),
    "nch1_act_plus_nchw": ("Add", NCHW, ("reduce", [3], 1), "input"),
    "rank2_plus_row_act": ("Add", (12, 70), "input", ("reduce", [0], 1)),
    "rank2_plus_column_const": ("Add", (12, 70), "input", ("const", (12, 1))),
    "c11_const_plus_nchw": ("Add", NCHW, ("const", (8, 1, 1)), "input"),
    "nc11_act_plus_nchw_relu": ("Add", NCHW, ("reduce", [2, 3], 1), "input", "Relu"),
    "sub_nchw_minus_1c11_const": ("Sub", NCHW, "input", ("const", (1, 8, 1, 1))),
    "sub_1c11_const_minus_nchw": ("Sub", NCHW, ("const", (1, 8, 1, 1)), "input"),
    "sub_nc11_act_minus_nchw": ("Sub", NCHW, ("reduce", [2, 3], 1), "input"),
    "sub_nchw_minus_scalar_act": ("Sub", NCHW, "input", ("reduce", [0, 1, 2, 3], 0)),
    "sub_same_shape": ("Sub", NCHW, "input", ("const", NCHW)),
    "mul_nchw_times_1c11_const": ("Mul", NCHW, "input", ("const", (1, 8, 1, 1))),
    "mul_scalar_const_times_nchw": ("Mul", NCHW, ("const", ()), "input"),
    "mul_nchw_times_n1hw_act": ("Mul", NCHW, "input", ("reduce", [1], 1)),
    "mul_nc11_act_times_nchw_relu": ("Mul", NCHW, ("reduce", [2, 3], 1), "input", "Relu"),
    "mul_square": ("Mul", (3, 50), "input", "input"),
}
KERNEL = {"Add": "es_add_i8", "Sub": "es_add_i8", "Mul": "es_mul_i8"}


def _step_body(folder: Path) -> str:
    return (folder / "model.c").read_text().split("void es_run_step(")[1]


def _agreement(y: np.ndarray, ref: np.ndarray, lsb: float) -> tuple[float, float, float]:
    """(share equal, share within 1 LSB, max error in LSB)."""
    err = np.abs(y.astype(np.float64) - ref) / lsb
    return float((err < 0.01).mean()), float((err <= 1.001).mean()), float(err.max())


def _output_lsb(path: Path) -> float:
    import onnx

    init = {i.name: i for i in onnx.load(str(path)).graph.initializer}
    y = "y_act" if "y_act_s" in init else "y"
    return float(onnx.numpy_helper.to_array(init[f"{y}_s"]))


@pytest.mark.parametrize("case", list(CASES))
def test_broadcast_binary_op_runs_as_integer_kernel_within_one_lsb(case, tmp_path):
    op, shape, a_spec, b_spec, *act = CASES[case]
    rng = np.random.default_rng(list(CASES).index(case))
    x = rng.normal(0, 1, size=shape).astype(np.float32)
    src = _model(tmp_path / f"{case}.onnx", x, op, a_spec, b_spec, act[0] if act else None)
    out = generate(src, tmp_path / case, precision="int8")
    body = _step_body(out)
    assert KERNEL[op] in body
    assert "es_binary_f32" not in body
    assert body.count("es_dequantize_i8_f32") == 1  # the model output only
    y, ref = run.run(out, x), ort_run(src, x)
    equal, within, worst = _agreement(y, ref, _output_lsb(src))
    print(f"{case}: {y.size} outputs, equal {equal:.4%}, within 1 LSB {within:.4%}, "
          f"max {worst:.2f} LSB")
    assert within >= 0.999
    assert worst <= 1.001
    # onnxruntime rounds the same real value once, so only a near-tie may land on the
    # other side; a wrong zero point or multiplier moves many outputs by less than 1 LSB
    # and shows up here, not in the 1-LSB bound
    assert equal >= 0.99


def test_lowering_picks_the_contiguous_kernel_when_broadcast_merges_away(tmp_path):
    """[1,C,H,W] + [C,H,W] is one contiguous run: plain es_add_i8, no stride table."""
    from edgesmith.targets.ir import lower

    x = np.random.default_rng(1).normal(size=(1, 4, 5, 6)).astype(np.float32)
    src = _model(tmp_path / "m.onnx", x, "Add", "input", ("const", (4, 5, 6)))
    calls = [c for st in lower(src, "int8").steps for c in st.calls]
    assert [c.fn for c in calls if c.fn.startswith("es_add")] == ["es_add_i8"]
    src = _model(tmp_path / "b.onnx", x, "Add", "input", ("const", (1, 4, 1, 1)))
    call = next(c for st in lower(src, "int8").steps for c in st.calls
                if c.fn.startswith("es_add"))
    assert call.fn == "es_add_i8_bcast"
    table = call.args[-1]
    assert table["bc.ndim"] == 2 and table["bc.shape"][:2] == [4, 30]
    assert table["bc.sa"][:2] == [30, 1] and table["bc.sb"][:2] == [1, 0]


def test_per_axis_constant_operand_stays_float_and_correct(tmp_path):
    """A per-channel quantized constant is not an int8 operand the kernels take: the Add
    runs in float between dequantize and quantize steps, still within 1 LSB."""
    x = np.random.default_rng(2).normal(size=NCHW).astype(np.float32)
    src = _model(tmp_path / "m.onnx", x, "Add", "input", ("const_per_axis", (1, 8, 1, 1), 1))
    out = generate(src, tmp_path / "c", precision="int8")
    body = _step_body(out)
    assert "es_binary_f32" in body and "es_add_i8" not in body
    y, ref = run.run(out, x), ort_run(src, x)
    _, within, worst = _agreement(y, ref, _output_lsb(src))
    assert within >= 0.999 and worst <= 1.001


# -- kernels ----------------------------------------------------------------------------------
def _random_shapes(rng: np.random.Generator):
    """(a shape, b shape) that broadcast: a random output of rank 1-6, each side with dims
    set to 1 and leading dims dropped at random; some long inner runs for the SIMD paths."""
    rank = int(rng.integers(1, 7))
    sizes = [1, 2, 3, 5, 7, 16, 17, 33, 40, 100]
    out, total = [], 1
    for _ in range(rank):
        d = int(rng.choice([s for s in sizes if total * s <= 60000] or [1]))
        out.append(d)
        total *= d
    sides = []
    for _ in range(2):
        s = [1 if rng.random() < 0.4 else d for d in out]
        sides.append(tuple(s[int(rng.integers(0, rank)) if rng.random() < 0.3 else 0:]))
    return sides


def _add_case(rng: np.random.Generator, i: int) -> list:
    from edgesmith.targets.lower.int8_eltwise import add_params

    sa, sb, sy = np.exp(rng.uniform(-6, 0, size=3))
    zp = [int(z) for z in rng.integers(-128, 128, size=3)]
    qmin = -128 if i % 3 else int(rng.integers(-128, 0))
    # every other Add/Sub in fp32 (onnxruntime's float arithmetic), the rest fixed point
    p = add_params(float(sa), float(sb), float(sy), *zp, qmin, 127, bool(i % 2), i // 2 % 2)
    return [p[k] for k in ("a_zp", "b_zp", "y_zp", "left_shift", "a_mult", "a_shift",
                           "b_mult", "b_shift", "y_mult", "y_shift", "qmin", "qmax", "sub",
                           "rq")] + [repr(p[k]) for k in ("a_scale", "b_scale", "y_scale")]


def _mul_case(rng: np.random.Generator, i: int) -> list[int]:
    from edgesmith.targets.lower.int8_eltwise import mul_params

    # real multipliers from 1e-5 to 2^8 (a left shift first), one past the SIMD's 2^14
    # (2^14.5: 255 * 255 * real + y_zp still fits int32)
    sa, sb = np.exp(rng.uniform(-6, 0, size=2))
    real = 2.0**14.5 if i == 7 else float(np.exp(rng.uniform(np.log(1e-5), np.log(2.0**8))))
    sy = float(sa * sb / real)
    zp = [int(z) for z in rng.integers(-128, 128, size=3)]
    qmin = -128 if i % 3 else int(rng.integers(-128, 0))
    p = mul_params(float(sa), float(sb), sy, *zp, qmin, 127)
    return [p[k] for k in ("a_zp", "b_zp", "y_zp", "mult", "shift", "qmin", "qmax")]


def _kernel_cases(n: int, seed: int = 0):
    from edgesmith.targets.lower.common import bcast_params

    rng = np.random.default_rng(seed)
    for i in range(n):
        ashape, bshape = _random_shapes(rng)
        oshape = np.broadcast_shapes(ashape, bshape)
        rank = len(oshape)
        pad_a = (1,) * (rank - len(ashape)) + ashape
        pad_b = (1,) * (rank - len(bshape)) + bshape
        bc = bcast_params(oshape, ashape, bshape)
        nd = bc["ndim"]
        is_mul = i % 2
        quant = _mul_case(rng, i // 2) if is_mul else _add_case(rng, i // 2)
        yield [is_mul, i + 1, rank, *pad_a, *pad_b, nd, *bc["shape"][:nd], *bc["sa"][:nd],
               *bc["sb"][:nd], *quant]


@pytest.mark.parametrize(("name", "cc", "flags", "wrapper"), FLAVOURS)
def test_broadcast_kernels_are_bit_identical_to_per_element_reference(name, cc, flags,
                                                                        wrapper, tmp_path):
    b = tmp_path / f"bcast_{name}"
    subprocess.run([cc, *flags, "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{RT}",
                    str(CHECK), str(RT / "kernels/add_int8.c"), str(RT / "kernels/mul_int8.c"),
                    "-o", str(b)], check=True)
    for args in _kernel_cases(40 if wrapper else 120):
        p = subprocess.run([*wrapper, str(b), *map(str, args)], capture_output=True, text=True,
                           timeout=60)
        assert p.returncode == 0, f"{name} {args}: {p.stdout}{p.stderr}"


def test_quantize_static_bias_add_and_scalar_mul_run_as_integer_kernels(tmp_path):
    """onnxruntime's own QDQ quantizer: Relu -> Add([1,C,1,1] initializer) -> Mul(scalar
    initializer); both constants become int8 under a DQ with a non-zero zero point."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime import quantization as q

    rng = np.random.default_rng(3)
    shape = (1, 16, 9, 11)
    nodes = [helper.make_node("Relu", ["input"], ["r"], name="relu0"),
             helper.make_node("Add", ["r", "bias"], ["t"], name="bias_add"),
             helper.make_node("Mul", ["t", "gain"], ["output"], name="gain_mul")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, list(shape))], [helper.make_tensor_value_info(
            "output", TensorProto.FLOAT, list(shape))], [
        numpy_helper.from_array(rng.normal(size=(1, 16, 1, 1)).astype(np.float32), "bias"),
        numpy_helper.from_array(np.array(0.7, np.float32), "gain")])
    fp32 = tmp_path / "fp32.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
              str(fp32))
    calib = iter([{"input": rng.normal(size=shape).astype(np.float32)} for _ in range(8)])

    class Reader(q.CalibrationDataReader):
        def get_next(self):
            return next(calib, None)

    src = tmp_path / "qdq.onnx"
    q.quantize_static(str(fp32), str(src), Reader(), quant_format=q.QuantFormat.QDQ,
                      activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8)
    out = generate(src, tmp_path / "c", precision="int8")
    body = _step_body(out)
    assert "es_add_i8_bcast" in body and "es_mul_i8" in body and "es_binary_f32" not in body
    x = rng.normal(size=shape).astype(np.float32)
    y, ref = run.run(out, x), ort_run(src, x)
    equal, within, worst = _agreement(y, ref, output_scale(src))
    print(f"quantize_static bias add + scalar mul: {y.size} outputs, equal {equal:.4%}, "
          f"within 1 LSB {within:.4%}, max {worst:.2f} LSB")
    assert within >= 0.999 and worst <= 1.001
