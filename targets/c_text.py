"""How Python values are written as C text in generated code: float and string literals,
designated initialisers of a parameter block, comments, wrapped lists. codegen.py and
tiling_c.py (the tiled segment's C) both write through these, so this module imports
neither of them."""

from __future__ import annotations

import math

import numpy as np


def c_float(v: float) -> str:
    v = float(v)
    if math.isnan(v):
        return "0.0f"
    v = max(min(v, 3.4028234e38), -3.4028234e38)
    s = f"{v:.9g}"
    if not any(ch in s for ch in ".e"):
        s += ".0"
    return s + "f"


def c_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def _wrap(items: list[str], indent: str, sep: str, width: int) -> str:
    """``items`` joined by ``sep`` in lines of at most ``width`` characters."""
    lines, cur = [], ""
    for it in items:
        piece = f"{it}{sep}"
        if cur and len(indent) + len(cur) + 1 + len(piece) > width:
            lines.append(indent + cur)
            cur = piece
        else:
            cur = f"{cur} {piece}" if cur else piece
    if cur:
        lines.append(indent + cur)
    return "\n".join(lines)


# fields that hold an edgesmith_rt.h constant, written by name: the lowerings keep the
# numbers (the kernels' Python mirrors compare them), model.c shows what they mean
_NAMED = {"rq": ("ES_RQ_FIXED", "ES_RQ_FP32"),
          "act": ("ES_ACT_NONE", "ES_ACT_RELU", "ES_ACT_CLIP", "ES_ACT_LEAKY",
                  "ES_ACT_HARDSWISH", "ES_ACT_SIGMOID", "ES_ACT_SILU", "ES_ACT_HARDSIGMOID")}


def _fields(a: dict) -> list[str]:
    """Designated initialisers of a parameter block; a str value is a C constant's name."""
    out = []
    for k, v in a.items():
        if k == "__struct__":
            continue
        names = _NAMED.get(k.rsplit(".", 1)[-1], ())
        if isinstance(v, list):
            out.append(f".{k} = {{{', '.join(str(int(x)) for x in v)}}}")
        elif isinstance(v, (float, np.floating)):
            out.append(f".{k} = {c_float(v)}")
        elif isinstance(v, str):
            out.append(f".{k} = {v}")
        elif not isinstance(v, bool) and 0 <= int(v) < len(names):
            out.append(f".{k} = {names[int(v)]}")
        else:
            out.append(f".{k} = {int(v)}")
    return out


def _comment(s: str) -> str:
    return s.replace("*/", "* /")
