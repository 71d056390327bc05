"""GRU: the recurrent layer of the conv+GRU keyword-spotting net (examples/zoo/kws_gru.py).

torch exports an nn.GRU as one ONNX GRU node per layer (opset 14 semantics, gates in z-r-h
order, ``linear_before_reset=1``), with the time-major Transpose and the Squeeze of the
direction axis around it as ordinary nodes. One node becomes one step, es_gru_f32
(kernels/gru_f32.c): the weights are packed as ONNX stores them (W [D][3H][I], R
[D][3H][H], B [D][6H]), which is already the row-per-output layout es_gemm_f32 reads, and
the scratch (input projection for all steps, state, recurrent sums) is planned in the
arena like every other kernel's, so inference allocates nothing.

What the kernel does not compute is refused with the node and the attribute named: other
activations than the default sigmoid/tanh, ``clip``, ``layout`` 1, per-sequence lengths
shorter than the input, or a run-time W, R or B. ``compat_rule`` gives the same answer
from the attributes alone, for the op-compat table (c_target.py).

In an INT8 (QDQ) model the GRU stays float (onnxruntime's static quantizer does not
quantize it): its input is dequantised by ``L.f32`` and a following QuantizeLinear
quantizes its output, as for any float step between Q/DQ pairs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..graph import Call, Kernel, Ref, params
from .common import unsupported
from .registry import lowers

if TYPE_CHECKING:
    from ..ir import Lowerer

DEFAULT_ACTIVATIONS = ("sigmoid", "tanh")


def _scratch(p: dict) -> int:
    """Bytes of es_gru_f32 scratch; mirrors ES_GRU_SCRATCH in edgesmith_rt.h."""
    return 4 * (3 * p["T"] + 6) * p["N"] * p["H"]


def _scratch_c(p: dict) -> str:
    return f"ES_GRU_SCRATCH({p['T']}, {p['N']}, {p['H']})"


GRU_F32 = Kernel("es_gru_f32", _scratch, _scratch_c)
GRU_F32_REF = Kernel("es_gru_f32_ref", _scratch, _scratch_c)


def attr_problem(a: dict[str, Any]) -> tuple[str, str] | None:
    """(what is not implemented, the fix) for GRU attributes ``a``, or None when the
    kernel computes them: shared by the lowering and the compat table."""
    dirs = 2 if a.get("direction", "forward") == "bidirectional" else 1
    acts = [str(x.decode() if isinstance(x, bytes) else x).lower()
            for x in a.get("activations", DEFAULT_ACTIVATIONS * dirs)]
    if acts != list(DEFAULT_ACTIVATIONS * dirs):
        return (f"attribute activations={acts} (only the default Sigmoid, Tanh)",
                "use nn.GRU's default gates, or another target for this model")
    if "clip" in a:
        return (f"attribute clip={a['clip']} (cell clipping is not implemented)",
                "export the GRU without clip, or use another target for this model")
    if a.get("layout", 0) != 0:
        return (f"attribute layout={a['layout']} (only layout 0, time-major)",
                "export with batch_first handled by a Transpose (torch.onnx does this)")
    if a.get("direction", "forward") not in ("forward", "reverse", "bidirectional"):
        return f"attribute direction={a['direction']!r}", "use forward, reverse or bidirectional"
    return None


@lowers("GRU")
def gru(L: Lowerer, node) -> None:
    a = L.attrs(node)
    problem = attr_problem(a)
    if problem:
        raise unsupported(node, *problem)
    x = L.f32(node.input[0])
    if len(x.shape) != 3:
        raise unsupported(node, f"input X of shape {x.shape} (expected [T, N, I])")
    t, n, i = x.shape
    dirs = 2 if a.get("direction", "forward") == "bidirectional" else 1
    h = int(a["hidden_size"]) if "hidden_size" in a else _hidden_from_r(L, node)
    w = _weight(L, node, 1, "W", (dirs, 3 * h, i))
    r = _weight(L, node, 2, "R", (dirs, 3 * h, h))
    b = _weight(L, node, 3, "B", (dirs, 6 * h), optional=True)
    _check_sequence_lens(L, node, t, n)
    h0 = _initial_h(L, node, (dirs, n, h))
    ys = _outputs(L, node, (t, dirs, n, h), (dirs, n, h))
    p = params("es_gru_params", T=t, N=n, I=i, H=h, dirs=dirs,
               reverse=int(a.get("direction", "forward") == "reverse"),
               linear_before_reset=int(a.get("linear_before_reset", 0)))
    kernel = GRU_F32_REF if L.kernels == "reference" else GRU_F32
    ins = [x.tensor] + ([h0.name] if isinstance(h0, Ref) and
                        L.tensors[h0.name].kind != "const" else [])
    outs = [y for y in ys if y]
    args = [Ref(x.tensor), Ref(L.const_tensor(node.name + "_W", w, "f32")),
            Ref(L.const_tensor(node.name + "_R", r, "f32")),
            Ref(L.const_tensor(node.name + "_B", b, "f32")), h0, Ref("__scratch"),
            *(Ref(y) if y else "NULL" for y in ys), p]
    L.add_step(node, ins, outs, [Call(kernel.fn, args, kernel)], scratch=kernel.scratch(p))
    for o, y, shape in zip(node.output[:2], ys, [(t, dirs, n, h), (dirs, n, h)], strict=False):
        if y:
            L.bind(o, y, shape)


def _hidden_from_r(L: Lowerer, node) -> int:
    r = L.const(node.input[2])
    if r is None:
        raise unsupported(node, "input R computed at run time", "make R an initializer")
    return int(r.shape[-1])


def _weight(L: Lowerer, node, k: int, what: str, shape, optional: bool = False) -> np.ndarray:
    """Input ``k`` (W, R or B) as float32 of ``shape``; zeros for an absent optional B."""
    if len(node.input) <= k or not node.input[k]:
        if optional:
            return np.zeros(shape, np.float32)
        raise unsupported(node, f"input {what} is missing")
    c = L.const(node.input[k])
    if c is None:
        raise unsupported(node, f"input {what} computed at run time",
                          f"make {what} an initializer")
    if tuple(c.shape) != tuple(shape):
        raise unsupported(node, f"input {what} of shape {tuple(c.shape)} (expected "
                                f"{tuple(shape)} from X, hidden_size and direction)")
    return np.ascontiguousarray(c, np.float32)


def _check_sequence_lens(L: Lowerer, node, t: int, n: int) -> None:
    """sequence_lens absent, or every sequence the input's full T steps long."""
    if len(node.input) <= 4 or not node.input[4]:
        return
    c = L.const(node.input[4])
    if c is None or c.size != n or not np.all(c == t):
        got = "computed at run time" if c is None else f"{c.reshape(-1).tolist()}"
        raise unsupported(node, f"input sequence_lens {got} (only every sequence {t} steps "
                                "long, or absent)", "pad the sequences to the same length")


def _initial_h(L: Lowerer, node, shape) -> Ref | str:
    """initial_h: NULL (zeros) when absent or a constant zero, else its buffer."""
    if len(node.input) <= 5 or not node.input[5]:
        return "NULL"
    c = L.const(node.input[5])
    if c is not None:
        if c.size != int(np.prod(shape)):
            raise unsupported(node, f"input initial_h of shape {tuple(c.shape)} (expected "
                                    f"{tuple(shape)})")
        if not np.any(c):
            return "NULL"
        return Ref(L.const_tensor(node.name + "_h0", c.reshape(shape), "f32"))
    v = L.f32(node.input[5])
    if int(np.prod(v.shape)) != int(np.prod(shape)):
        raise unsupported(node, f"input initial_h of shape {v.shape} (expected {tuple(shape)})")
    return Ref(v.tensor)


def _outputs(L: Lowerer, node, y_shape, yh_shape) -> list[str | None]:
    """Tensors for Y and Y_h where the model reads them, None where it does not."""
    out: list[str | None] = []
    for k, shape in enumerate((y_shape, yh_shape)):
        o = node.output[k] if len(node.output) > k else ""
        used = bool(o) and (o in L.consumers or o in L.graph_outputs)
        out.append(L.new_tensor(o, shape, "f32") if used else None)
    if not any(out):  # nothing reads it: the step is pruned after lowering
        out[1] = L.new_tensor(node.output[1] or node.name + "_Y_h", yh_shape, "f32")
    return out
