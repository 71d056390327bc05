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

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import c_runtime  # noqa: E402


def _one_op_model(path, op: str) -> None:
    """A float32 [1, 4] -> [1, 4] .tflite of one built-in element-wise ``op``, written with
    the schema's object API (no converter: the op is the point)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    def tensor(name: bytes, buf: int):
        t = s.TensorT()
        t.shape, t.type, t.buffer, t.name = [1, 4], s.TensorType.FLOAT32, buf, name
        return t

    code = s.OperatorCodeT()
    code.builtinCode = getattr(s.BuiltinOperator, op)
    code.deprecatedBuiltinCode = min(code.builtinCode, 127)  # 127: "see builtinCode"
    code.version = 1
    node = s.OperatorT()
    node.opcodeIndex, node.inputs, node.outputs = 0, [0], [1]
    graph = s.SubGraphT()
    graph.tensors = [tensor(b"x", 1), tensor(b"y", 2)]
    graph.inputs, graph.outputs, graph.operators = [0], [1], [node]
    model = s.ModelT()
    model.version, model.operatorCodes, model.subgraphs = 3, [code], [graph]
    model.buffers = [s.BufferT() for _ in range(3)]
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    path.write_bytes(bytes(b.Output()))


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
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    def tensor(name: bytes, kind: int, buf: int, q: bool = False):
        t = s.TensorT()
        t.shape, t.type, t.buffer, t.name = [1, 4], kind, buf, name
        if q:
            t.quantization = s.QuantizationParametersT()
            t.quantization.scale, t.quantization.zeroPoint = [0.5], [3]
        return t

    def code(op: str):
        c = s.OperatorCodeT()
        c.builtinCode = c.deprecatedBuiltinCode = getattr(s.BuiltinOperator, op)
        c.version = 1
        return c

    def node(k: int, i: int, o: int):
        n = s.OperatorT()
        n.opcodeIndex, n.inputs, n.outputs = k, [i], [o]
        return n

    graph = s.SubGraphT()
    graph.tensors = [tensor(b"x", s.TensorType.FLOAT32, 1),
                     tensor(b"q", s.TensorType.INT8, 2, q=True),
                     tensor(b"y", s.TensorType.FLOAT32, 3)]
    graph.inputs, graph.outputs = [0], [2]
    graph.operators = [node(0, 0, 1), node(1, 1, 2)]
    model = s.ModelT()
    model.version, model.operatorCodes = 3, [code("QUANTIZE"), code("DEQUANTIZE")]
    model.subgraphs, model.buffers = [graph], [s.BufferT() for _ in range(4)]
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    path.write_bytes(bytes(b.Output()))


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
