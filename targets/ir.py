"""The C runtime's IR: an ONNX graph lowered to a flat list of steps over typed tensors.

A ``Tensor`` is one buffer: an activation (planned into the arena) or a constant (packed
into weights.bin in the layout its kernel wants). A ``Step`` is one ONNX node (or a fused
group, e.g. DQ->Conv->Relu->Q) and holds the C calls that implement it, with tensor
references resolved later by codegen. Shape-only ops (Reshape, Flatten, Squeeze, ...)
produce no step: their output is a view of the input buffer with another shape.

The batch axis: a dynamic leading dimension is fixed to 1 (the Python runner loops over
the batch); a model with fully static shapes runs at exactly those shapes.

Per-op lowering lives in the ``lower`` package, one module per op family; the data
structures live in ``graph``; this module holds constant folding and the driver.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith.errors import (
    ConversionError,
    EdgesmithError,
    ModelLoadError,
    UnsupportedOpError,
    UsageError,
)

from .graph import DTYPES, Call, Graph, Ref, Step, Tensor, Value, c_ident
from .lower import INT8_PASSES, LOWER, LOWER_INT8, materialize_dequant, shift_uint8_to_int8

__all__ = ["DTYPES", "Call", "Graph", "Lowerer", "Ref", "Step", "Tensor", "Value", "c_ident",
           "lower", "load_model", "supported_ops", "unsupported_nodes"]

REQUANT_MODES = ("fp32", "fixed")
KERNEL_SETS = ("fast", "reference")


def supported_ops() -> set[str]:
    return set(LOWER) | {"Constant", "QuantizeLinear", "DequantizeLinear"}


class Lowerer:
    def __init__(self, model, precision: str, isa: frozenset[str] = frozenset(),
                 requant: str = "fp32", kernels: str = "fast"):
        import onnx

        self.onnx = onnx
        self.model = model
        self.precision = precision
        self.isa = isa  # macros the deploying compiler predefines (targets/isa.py)
        self.requant = requant  # int8 sums -> int8: "fp32" or "fixed" (lower/requant.py)
        # "fast" (default): the im2col / GEMM / depthwise kernels; "reference": the
        # portable reference kernels only (the oracle the tests compare the fast ones to)
        self.kernels = kernels
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                          17)
        g = model.graph
        self.nodes = list(g.node)
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.consumers: dict[str, list[Any]] = {}
        for n in self.nodes:
            for i in n.input:
                if i:
                    self.consumers.setdefault(i, []).append(n)
        self.graph_outputs = [o.name for o in g.output]
        self.consts: dict[str, np.ndarray] = {}
        for init in g.initializer:
            self.consts[init.name] = onnx.numpy_helper.to_array(init)
        self.env: dict[str, Value] = {}
        self.tensors: dict[str, Tensor] = {}
        self.steps: list[Step] = []
        self.done: set[int] = set()  # ids of nodes consumed by a fused pattern
        self.alias: dict[str, str] = {}  # onnx value -> onnx value it is bound to (fusions)
        self._deq_cache: dict[str, str] = {}
        self._never_const: set[str] = set()  # values that depend on a graph input

    # -- names and tensors ----------------------------------------------------------------
    def new_tensor(self, hint: str, shape, dtype: str, kind: str = "act", data=None,
                   scale=None, zero_point: int = 0) -> str:
        base = c_ident(hint)
        name, k = base, 1
        while name in self.tensors:
            k += 1
            name = f"{base}_{k}"
        self.tensors[name] = Tensor(name, tuple(int(d) for d in shape), dtype, kind, data,
                                    scale, zero_point)
        return name

    def const_tensor(self, hint: str, arr: np.ndarray, dtype: str) -> str:
        arr = np.ascontiguousarray(arr, dtype=DTYPES[dtype][0])
        return self.new_tensor(hint, arr.shape, dtype, "const", arr)

    def add_step(self, node, inputs, outputs, calls, inplace=False, scratch=0, op=None) -> Step:
        st = Step(node.name or f"{node.op_type}_{len(self.steps)}", op or node.op_type,
                  list(inputs), list(outputs), calls, inplace, scratch)
        self.steps.append(st)
        return st

    # -- values -----------------------------------------------------------------------------
    def const(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is known at generation time (folded lazily).

        Iterative, with an explicit stack: asking about a value walks back through its
        producers, and a recursive walk overflowed Python's stack on deep graphs (the QDQ
        model of EfficientNet-B0, a chain of 2,000 elementwise nodes). Inputs are tried in
        order and the walk stops at the first that does not fold, as ``all()`` would.
        Values that depend on a graph input never fold and are remembered, so asking about
        every node of a chain stays linear; a Shape whose source is not lowered yet may
        fold later and is only remembered for this call."""
        if not name:
            return None
        stack, on_stack, not_now = [name], {name}, set()
        while stack:
            cur = stack[-1]
            if cur in self.consts or cur in not_now or cur in self._never_const:
                on_stack.discard(stack.pop())
                continue
            pending = self._const_pending(cur, not_now)
            if pending is None:
                on_stack.discard(stack.pop())
            elif pending in on_stack:  # a cycle (not a valid ONNX graph): nothing folds
                not_now.update(stack)
            else:
                stack.append(pending)
                on_stack.add(pending)
        return self.consts.get(name)

    def _const_pending(self, name: str, not_now: set[str]) -> str | None:
        """One step of ``const``'s walk for an unresolved ``name``: fold it (or mark it as
        not folding) and return None, or return the input to resolve first."""
        node = self.producer.get(name)
        if node is None:
            self._never_const.add(name)
        elif node.op_type == "Constant":
            self._eval(node)
        elif node.op_type == "Shape":
            src = self.alias.get(node.input[0], node.input[0])
            if src in self.env:
                self._fold_shape(node, name, self.env[src].shape)
            # a Shape of folded shape arithmetic (the Expand target of a ViT's class token
            # broadcast over the batch, exported without constant folding): walk it first
            elif src in self.consts:
                self._fold_shape(node, name, self.consts[src].shape)
            elif src not in self._never_const and src not in not_now:
                return src
        else:
            ins = [i for i in node.input if i]
            for i in ins:
                if i in self._never_const:
                    self._never_const.add(name)
                    break
                if i in not_now:
                    break
                if i not in self.consts:
                    return i
            else:
                if ins:
                    self._eval(node)
        if name not in self.consts and name not in self._never_const:
            not_now.add(name)
        return None

    def _fold_shape(self, node, name, dims):
        shape = np.array(dims, dtype=np.int64)
        a = {x.name: self.onnx.helper.get_attribute_value(x) for x in node.attribute}
        shape = shape[a.get("start", 0):a.get("end", len(shape))]
        self.consts[name] = shape
        return shape

    def _eval(self, node) -> None:
        from onnx.reference import ReferenceEvaluator

        if node.op_type in ("DequantizeLinear", "QuantizeLinear", "Identity"):
            self.consts[node.output[0]] = _fold_qdq(node, [self.consts.get(i) for i in node.input],
                                                    self.attrs(node))
            return

        h = self.onnx.helper
        ins = [i for i in node.input if i]
        feeds = {i: self.consts[i] for i in ins}
        vin = [h.make_tensor_value_info(i, h.np_dtype_to_tensor_dtype(feeds[i].dtype), None)
               for i in ins]
        vout = [h.make_tensor_value_info(o, 0, None) for o in node.output if o]
        g = h.make_graph([node], "fold", vin, vout)
        m = h.make_model(g, opset_imports=list(self.model.opset_import))
        m.ir_version = self.model.ir_version
        try:
            res = ReferenceEvaluator(m).run(None, feeds)
        except Exception as e:  # pragma: no cover - onnx's reference evaluator failed
            raise ConversionError(f"cannot fold constant node {node.name!r} ({node.op_type}): "
                                  f"{e}", where=node.name or node.op_type,
                                  fix="simplify the model (onnxslim) or report a bug") from None
        for o, r in zip([o for o in node.output if o], res, strict=False):
            self.consts[o] = np.asarray(r)

    def value(self, name: str) -> Value:
        name = self.alias.get(name, name)
        if name in self.env:
            return self.env[name]
        c = self.const(name)
        if c is not None:
            raise UnsupportedOpError(f"constant value {name!r} used as an activation",
                                     where=name, fix="fold it or report it as a bug")
        raise ConversionError(f"value {name!r} has no producer", where=name,
                              fix="check the model with onnx.checker; it must be a DAG in "
                                  "topological order")

    def f32(self, name: str) -> Value:
        """A float32 buffer for ``name``, materialising a pending dequantisation."""
        v = self.value(name)
        if not v.deq:
            return v
        return materialize_dequant(self, name, v)

    def bind(self, name: str, tensor: str, shape, deq: bool = False) -> None:
        self.env[name] = Value(tensor, tuple(int(d) for d in shape), deq)

    def attrs(self, node) -> dict[str, Any]:
        out = {}
        for a in node.attribute:
            v = self.onnx.helper.get_attribute_value(a)
            out[a.name] = v.decode() if isinstance(v, bytes) else v
        return out

    def single_consumer(self, name: str):
        cs = self.consumers.get(name, [])
        if len(cs) == 1 and name not in self.graph_outputs:
            return cs[0]
        return None

    # -- driver -----------------------------------------------------------------------------
    def run(self) -> Graph:
        inputs, input_names = self._bind_inputs()
        for node in self.nodes:
            if id(node) in self.done or node.op_type == "Constant" or self._folds_later(node):
                continue
            self._lower_node(node)
        outputs = self._bind_outputs()
        gr = Graph(self.tensors, self.steps, inputs, outputs, input_names,
                   list(self.graph_outputs), self.precision)
        _prune_unused(gr)
        if self.precision == "int8":
            for graph_pass in INT8_PASSES:
                graph_pass(gr)
        gr.model_id = _model_id(gr)
        return gr

    def _bind_inputs(self) -> tuple[list[str], list[str]]:
        """Input tensors (a dynamic batch fixed to 1) and their ONNX names."""
        inputs, input_names = [], []
        for vi in self.model.graph.input:
            if vi.name in self.consts:
                continue
            tt = vi.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
            if dims and dims[0] <= 0:
                dims[0] = 1
            if any(d <= 0 for d in dims):
                raise UnsupportedOpError(
                    f"input {vi.name!r} has dynamic dims other than the batch: {dims}",
                    where=vi.name, fix="export the model with fixed spatial sizes")
            if tt.elem_type != self.onnx.TensorProto.FLOAT:
                raise UnsupportedOpError(f"input {vi.name!r} is not float32", where=vi.name,
                                         fix="the C runtime takes float32 inputs")
            t = self.new_tensor("in_" + vi.name, dims, "f32", "input")
            self.bind(vi.name, t, dims)
            inputs.append(t)
            input_names.append(vi.name)
        return inputs, input_names

    def _folds_later(self, node) -> bool:
        """A node whose outputs fold to constants: folded lazily when a consumer asks."""
        outs = [o for o in node.output if o]
        return bool(outs) and all(o not in self.env for o in outs) and (
            self._all_const(node)
            or (node.op_type == "Shape" and self.alias.get(node.input[0], node.input[0])
                in self.env))

    def _lower_node(self, node) -> None:
        """One node through its INT8 pattern or its float lowering. A lowering that fails
        with anything but an EdgesmithError is a generator fault on a model it accepted:
        it becomes a ConversionError naming the node, not a traceback."""
        try:
            fn8 = LOWER_INT8.get(node.op_type) if self.precision == "int8" else None
            if fn8 is not None and fn8(self, node):
                return
            fn = LOWER.get(node.op_type)
            if fn is None:
                raise UnsupportedOpError(
                    f"op {node.op_type} (node {node.name!r}) is not supported by the C runtime",
                    where=node.name or node.op_type,
                    fix=f"supported ops: {', '.join(sorted(supported_ops()))}")
            fn(self, node)
        except EdgesmithError:
            raise
        except Exception as e:
            raise ConversionError(
                f"lowering {node.op_type} node {node.name!r} failed: {type(e).__name__}: {e}",
                where=node.name or node.op_type,
                fix="check the node's attributes and inputs (onnx.checker), simplify the "
                    "model, or report a bug with it") from e

    def _bind_outputs(self) -> list[str]:
        """Output tensors, each owning its buffer (an input or a repeated tensor is copied)."""
        outputs: list[str] = []
        for name in self.graph_outputs:
            v = self.f32(name)
            t = self.tensors[v.tensor]
            if t.kind in ("input", "output") or v.tensor in outputs:
                dst = self.new_tensor("out_" + name, v.shape, "f32")
                self.steps.append(Step("copy_" + name, "Identity", [v.tensor], [dst],
                                       [Call("es_copy", [Ref(dst), Ref(v.tensor), t.nbytes])]))
                v = Value(dst, v.shape)
                t = self.tensors[dst]
            t.kind = "output"
            t.shape = v.shape
            outputs.append(v.tensor)
        return outputs

    def _all_const(self, node) -> bool:
        ins = [i for i in node.input if i]
        return bool(ins) and all(self.const(i) is not None for i in ins)


def _fold_qdq(node, ins, attrs) -> np.ndarray:
    x = ins[0]
    if node.op_type == "Identity":
        return x
    scale = ins[1].astype(np.float32)
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros((), np.uint8 if
                                                                    node.op_type == "Quantize"
                                                                    "Linear" else x.dtype)
    if scale.ndim == 1 and scale.size > 1:
        axis = attrs.get("axis", 1) % x.ndim
        shape = [1] * x.ndim
        shape[axis] = scale.size
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    if node.op_type == "DequantizeLinear":
        return ((x.astype(np.int64) - zp.astype(np.int64)) * scale).astype(np.float32)
    info = np.iinfo(zp.dtype)
    q = np.rint(x.astype(np.float32) / scale) + zp.astype(np.int64)
    return np.clip(q, info.min, info.max).astype(zp.dtype)


def _prune_unused(g: Graph) -> None:
    used = set(g.inputs) | set(g.outputs)
    for st in g.steps:
        used.update(st.inputs)
        used.update(st.outputs)
        for c in st.calls:
            used.update(a.name for a in c.args if isinstance(a, Ref))
    for name in [n for n in g.tensors if n not in used]:
        del g.tensors[name]


def _model_id(g: Graph) -> int:
    h = hashlib.sha256()
    for t in g.consts():
        h.update(t.name.encode())
        h.update(t.data.tobytes())
    for st in g.steps:
        h.update(repr([(c.fn, c.args) for c in st.calls]).encode())
    return int.from_bytes(h.digest()[:4], "little") & 0x7FFFFFFF


def load_model(path: Path):
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as e:
        raise ModelLoadError(f"cannot read ONNX model: {e}", where=str(path)) from None
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # shape inference is a convenience; lowering computes its own shapes
        pass
    return model


def lower(path_or_model, precision: str = "fp32", isa: frozenset[str] = frozenset(),
          requant: str = "fp32", kernels: str = "fast") -> Graph:
    """ONNX (path or ModelProto) -> Graph. ``precision='int8'`` turns QDQ patterns into
    quantized kernels; anything else runs in float between dequantize/quantize steps.
    ``isa``: the deploying compiler's predefined macros, where a kernel's weight packing
    depends on its instructions (isa.macros). ``requant``: how int8 convolutions, Gemm and
    GlobalAveragePool rescale their sums, "fp32" (XNNPACK's and onnxruntime's arithmetic)
    or "fixed" (TFLite's integer-only reference, for cores without an FPU). ``kernels``:
    "fast", or "reference" for the portable reference kernels only (the tests' oracle)."""
    _check_choice("precision", precision, ("fp32", "int8"))
    _check_choice("requant", requant, REQUANT_MODES)
    _check_choice("kernels", kernels, KERNEL_SETS)
    model = path_or_model
    if isinstance(path_or_model, (str, Path)):
        model = load_model(Path(path_or_model))
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node):
        model = copy.deepcopy(model) if model is path_or_model else model
        shift_uint8_to_int8(model)
    return Lowerer(model, precision, isa, requant, kernels).run()


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UsageError(f"{name} must be one of {', '.join(map(repr, choices))}, not {value!r}",
                         where=name, fix=f"pass {name}={choices[0]!r} or another of those")


def unsupported_nodes(path_or_model) -> list[tuple[str, str]]:
    """(node name, op type) of every node the C runtime cannot lower."""
    model = path_or_model
    if isinstance(path_or_model, (str, Path)):
        model = load_model(Path(path_or_model))
    ok = supported_ops()
    return [(n.name, n.op_type) for n in model.graph.node if n.op_type not in ok]
