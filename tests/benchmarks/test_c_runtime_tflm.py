"""benchmarks/c_runtime.py: TFLite Micro's arena for a model with an op TFLM lacks is
measured on the model with a stand-in op (the same tensors), and the report says so; the
C++ messages that say which op is missing are captured, not lost. (TFLM itself is the
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

