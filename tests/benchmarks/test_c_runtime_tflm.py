"""benchmarks/c_runtime.py: TFLite Micro's arena for a model with an op TFLM lacks is
measured on the model with a stand-in op (the same tensors), and the report says so; the
C++ messages that say which op is missing are captured, not lost; the int8-input variant
of a model (its input's QUANTIZE folded out) takes the quantized input and gives the same
outputs. (TFLM itself is the
bench extra, dev builds only, not installed for the tests: the stand-in is checked on
LiteRT, which runs both ops.)"""

from __future__ import annotations

import os
import sys

import numpy as np

from edgesmith.convert.runtime_compat import write_tflite
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import c_runtime  # noqa: E402


def _chain_model(path, ops: list[str], kinds: list[str], quantized: int | None = None) -> None:
    """A .tflite of [1, 4] tensors t0 -> ops[0] -> t1 -> ops[1] -> ..., tensor i of type
    kinds[i] ("FLOAT32", "INT8"), tensor ``quantized`` with scale 0.5 and zero point 3;
    written with the schema's object API (no converter: the ops are the point)."""
    from ai_edge_litert import schema_py_generated as s

    def tensor(i: int):
        t = s.TensorT()
        t.shape, t.type, t.buffer = [1, 4], getattr(s.TensorType, kinds[i]), i + 1
        t.name = f"t{i}".encode()
        if i == quantized:
            t.quantization = s.QuantizationParametersT()
            t.quantization.scale, t.quantization.zeroPoint = [0.5], [3]
        return t

    def code(op: str):
        c = s.OperatorCodeT()
        c.builtinCode = getattr(s.BuiltinOperator, op)
        c.deprecatedBuiltinCode = min(c.builtinCode, 127)  # 127: "see builtinCode"
        c.version = 1
        return c

    def node(k: int):
        n = s.OperatorT()
        n.opcodeIndex, n.inputs, n.outputs = k, [k], [k + 1]
        return n

    graph = s.SubGraphT()
    graph.tensors = [tensor(i) for i in range(len(ops) + 1)]
    graph.inputs, graph.outputs = [0], [len(ops)]
    graph.operators = [node(k) for k in range(len(ops))]
    model = s.ModelT()
    model.version, model.operatorCodes = 3, [code(op) for op in ops]
    model.subgraphs, model.buffers = [graph], [s.BufferT() for _ in range(len(ops) + 2)]
    write_tflite(model, path)


def _one_op_model(path, op: str) -> None:
    """A float32 [1, 4] -> [1, 4] .tflite of one built-in element-wise ``op``."""
    _chain_model(path, [op], ["FLOAT32", "FLOAT32"])


def _run(path, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def test_stand_in_replaces_the_op_and_keeps_the_graph(tmp_path):
    src, dst = tmp_path / "relu01.tflite", tmp_path / "stand_in.tflite"
    _one_op_model(src, "RELU_0_TO_1")
    x = np.array([[-1.0, 0.5, 3.0, 7.0]], np.float32)
    np.testing.assert_array_equal(_run(src, x), [[0.0, 0.5, 1.0, 1.0]])
    assert c_runtime.tflite_stand_ins(src, dst, c_runtime.TFLM_STAND_INS) == {
        "RELU_0_TO_1": "RELU6"}
    # the same tensors, now through RELU6: clamped to [0, 6], so the op really changed
    np.testing.assert_array_equal(_run(dst, x), [[0.0, 0.5, 3.0, 6.0]])
    # nothing to replace: no file, no replacements
    other = tmp_path / "none.tflite"
    assert c_runtime.tflite_stand_ins(dst, other, c_runtime.TFLM_STAND_INS) == {}
    assert not other.exists()


def test_c_output_captures_what_native_code_prints_and_the_exception():
    def native_print_then_fail():
        os.write(2, b"Didn't find op for builtin opcode 'RELU_0_TO_1'\n")
        os.write(1, b"x" * 200_000)  # more than a pipe buffer: drained while it runs
        raise RuntimeError("failed to allocate tensors")

    res, text = c_runtime._c_output(native_print_then_fail)
    assert isinstance(res, RuntimeError)
    assert text.startswith("Didn't find op for builtin opcode 'RELU_0_TO_1'")
    assert len(text) == len("Didn't find op for builtin opcode 'RELU_0_TO_1'\n") + 200_000
    assert c_runtime._c_output(lambda: 7) == (7, "")



def _quantize_dequantize_model(path) -> None:
    """float32 [1, 4] -> QUANTIZE (scale 0.5, zero point 3) -> int8 -> DEQUANTIZE -> float32"""
    _chain_model(path, ["QUANTIZE", "DEQUANTIZE"], ["FLOAT32", "INT8", "FLOAT32"], quantized=1)


def test_int8_input_variant_takes_the_quantized_input(tmp_path):
    src, dst = tmp_path / "qdq.tflite", tmp_path / "int8_input.tflite"
    _quantize_dequantize_model(src)
    x = np.array([[-1.0, 0.25, 2.0, 100.0]], np.float32)
    want = _run(src, x)  # q = clamp(round(x / 0.5) + 3): 1, 3, 7, 127 -> (q - 3) * 0.5
    np.testing.assert_array_equal(want, [[-1.0, 0.0, 2.0, 62.0]])
    assert c_runtime.tflite_int8_input(src, dst)
    np.testing.assert_array_equal(_run(dst, np.array([[1, 3, 7, 127]], np.int8)), want)
    # no quantized float input left: nothing to fold, no file
    again = tmp_path / "again.tflite"
    assert not c_runtime.tflite_int8_input(dst, again) and not again.exists()
