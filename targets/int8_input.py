"""The int8 entry point of an int8 C model (C option ``input: int8``).

A static INT8 model made from a float network starts with the input's QuantizeLinear: the
caller hands over float32 pixels (96x96x3: 110,592 B) and the first step turns them into
int8 (27,648 B). Both live in the arena, and the float one stays whole for as long as
anything still reads it, which with patch-based execution (tiling.py) is the whole tiled
segment: at MobileNetV2-96 it alone is 0.37x the tensor-level bound. An MCU camera gives
8-bit pixels, and TensorFlow Lite Micro's int8 models take an int8 input tensor, which the
caller fills in the arena (``interpreter->input(0)->data.int8``) and which TFLM counts in
its arena.

So with ``input: int8`` the QuantizeLinear goes: the quantized tensor becomes the model's
input, the caller passes int8 values quantized with the scale and zero point model.h
states (ES_INPUT<i>_SCALE, ES_INPUT<i>_ZERO_POINT: q = clamp(rint(x / scale) + zp)), and
the arena holds that int8 input as TFLM's does; no float copy exists anywhere in the
model's RAM. Outputs are unchanged.

With ``input: float_in_place`` the caller still passes float32, and the QuantizeLinear
writes the int8 copy over the float input's own arena slot (es_quantize_f32_i8 reads
element i before it writes byte i, and byte i lies below element i's four): the slot
holds the float input up to that step and the int8 copy's bytes after it, and the planner
(``Graph.consumed``, a buffer that shrinks) gives the rest of the slot to later tensors.
The two never live side by side, which is where the tensor-level bound of a net whose
peak is its first step sits (MobileNetV3-small-224: 602,112 + 150,528 B). The price is
the input itself: a run consumes an input copied in with es_input or written through
es_input_ptr, and a second run needs it copied in again (ES_ERR_INPUT_SPENT otherwise).
An input bound with es_bind_input is only read, as always, and runs any number of times.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Literal

import numpy as np

from edgesmith.errors import UsageError

from .graph import MAX_BOUND_INPUTS, Graph, Ref, Step

InputOption = Literal["float", "int8", "float_in_place"]
QUANTIZE = "es_quantize_f32_i8"


def quantizer(g: Graph, name: str) -> Step | None:
    """The one step reading input ``name``, when it is a whole-tensor QuantizeLinear."""
    readers = [st for st in g.steps if name in st.inputs]
    if len(readers) != 1 or name in g.outputs:
        return None
    st = readers[0]
    if len(st.calls) != 1 or st.calls[0].fn != QUANTIZE or st.inputs != [name]:
        return None
    src, dst, n, _, _ = st.calls[0].args
    whole = g.tensors[name].size
    if not (isinstance(src, Ref) and isinstance(dst, Ref) and not src.offset
            and not dst.offset and n == whole):
        return None
    return st


def _quantized_inputs(g: Graph, option: str, does: str,
                      names: list[str] | None = None) -> dict[str, Step]:
    """Input name -> its QuantizeLinear step, for the inputs ``names`` (all by default) that
    a QuantizeLinear of their own reads. C option ``input: <option>`` (``does``: what it
    does with that step, for the fix) is refused (UsageError) when the build is not int8
    or no such input exists: the caller could not know how to quantize."""
    if g.precision != "int8":
        raise UsageError(f"c option input: {option} needs an int8 build; this one is "
                         f"{g.precision}", where="options.input",
                         fix="set input: float (the default) for a float build, or build "
                             "with precision int8")
    steps = {n: st for n in (g.inputs if names is None else names)
             if (st := quantizer(g, n)) is not None}
    if not steps:
        raise UsageError(
            f"c option input: {option}: no model input is quantized by a QuantizeLinear of "
            f"its own (inputs {', '.join(g.input_names)})", where="options.input",
            fix=f"set input: float (the default); input: {option} {does}")
    return steps


def fold_input_quantize(g: Graph) -> Graph:
    """``g`` with each float input's QuantizeLinear folded out: its int8 output becomes the
    input (scale and zero point kept on the tensor, for model.h)."""
    found = _quantized_inputs(g, "int8", "folds the input's QuantizeLinear of a statically "
                                         "quantized model")
    tensors, steps, inputs = dict(g.tensors), list(g.steps), list(g.inputs)
    for i, name in enumerate(g.inputs):
        if name not in found:
            continue
        st = found[name]
        _, _, _, scale, zp = st.calls[0].args
        q = st.outputs[0]
        tensors.pop(name)
        tensors[q] = replace(tensors[q], kind="input",
                             scale=np.asarray([scale], dtype=np.float32), zero_point=int(zp))
        steps.remove(st)
        inputs[i] = q
    return replace(g, tensors=tensors, steps=steps, inputs=inputs)


def consume_inputs(g: Graph) -> Graph:
    """``g`` with each float input that a QuantizeLinear of its own reads marked consumed:
    the planner puts the int8 copy over the input's slot. Inputs past the
    ES_MAX_BOUND_INPUTS the model object tracks stay as they are."""
    found = _quantized_inputs(g, "float_in_place", "quantizes the input of a statically "
                                                   "quantized model over its own slot",
                              g.inputs[:MAX_BOUND_INPUTS])
    return replace(g, consumed=tuple(found))


def input_arenas(g: Graph, float_arena: int, arena: Callable[[Graph], int]) -> dict[str, int]:
    """What C option ``input`` would save: ``float_arena``, the arena planned for ``g`` (a
    build taking float inputs, the default), and the one ``arena`` plans under each other
    option, for ``edgesmith plan`` and the message of an arena budget miss. Empty when
    neither applies (an option's own refusal: not int8, no input quantized by a step of
    its own) or neither lowers the arena. The build never switches by itself: ``int8``
    changes what the caller passes, ``float_in_place`` lets a run consume the input copied
    in."""
    out = {"float": float_arena}
    for option, change in (("float_in_place", consume_inputs), ("int8", fold_input_quantize)):
        try:
            out[option] = arena(change(g))
        except UsageError:  # the option does not apply to g
            continue
    return out if min(out.values()) < float_arena else {}


def arenas_note(a: dict[str, int] | None) -> str:
    """``input_arenas`` in words, for plan.txt and a budget miss ("" when empty)."""
    if not a:
        return ""
    what = {"float": "the default", "float_in_place": "a run consumes the input copied in",
            "int8": "the caller passes the input quantized"}
    return "untiled arena by C option input: " + ", ".join(
        f"{k} {v} B ({what[k]})" for k, v in a.items())


def quantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    """What the caller of an int8-input model does to float inputs: es_quantize_f32_i8's
    arithmetic (float32 division, round half to even, + zp, clamp), so the int8 model gives
    the float-input model's output bit for bit."""
    v = np.rint(np.asarray(x, dtype=np.float32) / np.float32(scale)) + np.float32(zero_point)
    return np.clip(v, -128, 127).astype(np.int8)


def folder_quantization(folder: Path) -> tuple[float, int] | None:
    """(scale, zero point) of input 0 from a generated folder's model.h, when the model
    takes it as int8 (None: a float input)."""
    text = (Path(folder) / "model.h").read_text()
    s = re.search(r"#define ES_INPUT0_SCALE (\S+?)f?\n", text)
    z = re.search(r"#define ES_INPUT0_ZERO_POINT (-?\d+)", text)
    return (float(s.group(1)), int(z.group(1))) if s and z else None


def raw_input(folder: Path, x: np.ndarray) -> np.ndarray:
    """The bytes edgesmith_bench --input expects of float inputs ``x``: float32 as is, or
    quantized for an int8-input model."""
    q = folder_quantization(folder)
    return np.asarray(x).astype("<f4") if q is None else quantize(x, *q)
