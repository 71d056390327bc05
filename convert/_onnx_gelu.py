"""Exact GELU subgraphs marked so that onnx2tf converts each into TFLite's builtin GELU.

torch's ``nn.GELU()`` exports (opset < 20) as ``x -> Div(sqrt 2) -> Erf -> Add(1) ->
Mul(x) -> Mul(0.5)``. A lone ``Erf`` becomes ``tf.math.erf`` in onnx2tf 1.28, a Select-TF
(Flex) op the builtin LiteRT interpreter cannot run (or, with ``replace_to_pseudo_operators
["erf"]``, written-out arithmetic whose division fails once quantized). onnx2tf does
recognise this exact subgraph and emits ``tf.nn.gelu(approximate=False)``, TFLite's GELU
(one op; one table lookup in int8), but its check (ops/Div.py) asks the divisor for
``.numpy()``: true of a ``Constant`` node's output, which onnx2tf turns into a TF
tensor, false of an initializer, which it keeps as a numpy array. onnxslim turns Constant
nodes into initializers, so on a simplified model the GELU goes unrecognised.

``mark_exact_gelus`` gives each exact GELU's Div its sqrt(2) from a Constant node again.
The model stays valid ONNX and computes the same (onnx2tf runs it in onnxruntime before
converting, to learn every tensor's shape); only the copy handed to onnx2tf is changed.
Every intermediate of the pattern must feed only the next node, as onnx2tf requires.
"""

from __future__ import annotations

import math
from typing import Any

from edgesmith.convert.onnx_graph import consumers_of

SQRT2 = math.sqrt(2.0)


def exact_gelus(model: Any) -> list[Any]:
    """The Div node of each exact-GELU subgraph of ``model`` (an onnx ModelProto)."""
    import onnx

    g = model.graph
    consts = {i.name: onnx.numpy_helper.to_array(i) for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = onnx.numpy_helper.to_array(n.attribute[0].t)
    consumers = consumers_of(g)
    outputs = {o.name for o in g.output}
    producer = {o: n for n in g.node for o in n.output}

    def only_next(name: str, op: str):
        cs = consumers.get(name, [])
        if len(cs) == 1 and cs[0].op_type == op and name not in outputs:
            return cs[0]
        return None

    def is_const(name: str, value: float) -> bool:
        c = consts.get(name)
        return c is not None and c.size == 1 and abs(float(c.reshape(-1)[0]) - value) < 1e-6

    found = []
    for erf in [n for n in g.node if n.op_type == "Erf"]:
        div = producer.get(erf.input[0])
        if div is None or div.op_type != "Div" or not is_const(div.input[1], SQRT2) \
                or only_next(div.output[0], "Erf") is not erf:
            continue
        add = only_next(erf.output[0], "Add")  # onnx2tf's order: (erf, 1), (x, ...), (., 0.5)
        mul = add and only_next(add.output[0], "Mul")
        half = mul and only_next(mul.output[0], "Mul")
        if half and list(add.input[:1]) == [erf.output[0]] and is_const(add.input[1], 1.0) \
                and list(mul.input) == [div.input[0], add.output[0]] \
                and half.input[0] == mul.output[0] and is_const(half.input[1], 0.5):
            found.append(div)
    return found


def exact_gelu_erfs(model: Any) -> set[str]:
    """The output names of the Erf nodes that sit inside an exact GELU: what onnx2tf turns
    into TFLite's GELU. Any other Erf is written out as arithmetic (see ``_onnx2tf``)."""
    divs = {d.output[0] for d in exact_gelus(model)}
    return {n.output[0] for n in model.graph.node if n.op_type == "Erf" and n.input[0] in divs}


def mark_exact_gelus(model: Any) -> int:
    """Give each exact GELU's Div its divisor from a Constant node (in place), so onnx2tf
    recognises the GELU; returns how many were marked."""
    import numpy as np
    import onnx

    divs = exact_gelus(model)
    g = model.graph
    for div in divs:
        name = f"{div.name}_sqrt2"
        const = onnx.helper.make_node("Constant", [], [name], name=name,
                                      value=onnx.numpy_helper.from_array(
                                          np.array(SQRT2, np.float32), name))
        g.node.insert(list(g.node).index(div), const)
        div.input[1] = name
    used = {i for n in g.node for i in n.input}
    for init in [i for i in g.initializer if i.name not in used]:  # the old divisors
        g.initializer.remove(init)
    return len(divs)
