"""Resize and Upsample.

Its own module because the op is mostly attribute handling: ONNX's coordinate
transformation and nearest-rounding modes, and the pre-opset-11 / Upsample forms, are
all resolved here into integer codes and float scales, so the single C kernel stays a
switch and never sees an ONNX attribute.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..graph import Call, Ref, params
from .common import unsupported
from .registry import lowers

if TYPE_CHECKING:
    from ..ir import Lowerer

COORD = {m: "ES_COORD_" + m.upper() for m in (
    "half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn")}
NEAREST = {m: "ES_NEAREST_" + m.upper() for m in (
    "round_prefer_floor", "round_prefer_ceil", "floor", "ceil")}


@lowers("Resize", "Upsample")
def resize(L: Lowerer, node) -> None:
    a = L.attrs(node)
    x = L.f32(node.input[0])
    nd = len(x.shape)
    scales = sizes = None
    if node.op_type == "Upsample" or L.opset < 11:
        scales = a.get("scales")
        if scales is None:
            scales = L.const(node.input[1])
        coord, nearest = "asymmetric", "floor"
    else:
        if len(node.input) > 2 and node.input[2]:
            scales = L.const(node.input[2])
        if len(node.input) > 3 and node.input[3]:
            sizes = L.const(node.input[3])
        coord = a.get("coordinate_transformation_mode", "half_pixel")
        nearest = a.get("nearest_mode", "round_prefer_floor")
    mode = a.get("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear") or nd != 4:
        raise unsupported(node, f"mode {mode} on {nd}-D input", "use nearest or linear, 4-D")
    if coord not in COORD or nearest not in NEAREST:
        raise unsupported(node, f"coordinate mode {coord} / nearest mode {nearest}")
    if sizes is not None and len(sizes):
        osz = [int(s) for s in sizes]
        sc = [osz[i] / x.shape[i] for i in range(nd)]
    elif scales is not None and len(scales):
        sc = [float(s) for s in np.asarray(scales).reshape(-1)]
        osz = [int(math.floor(x.shape[i] * sc[i])) for i in range(nd)]
    else:
        raise unsupported(node, "scales/sizes computed at run time")
    if osz[0] != x.shape[0] or osz[1] != x.shape[1]:
        raise unsupported(node, "resizing the batch or channel axis")
    y = L.new_tensor(node.output[0], osz, "f32")
    L.add_step(node, [x.tensor], [y], [Call("es_resize2d_f32", [
        Ref(x.tensor), Ref(y), params(
            "es_resize_params", NC=x.shape[0] * x.shape[1], H=x.shape[2], W=x.shape[3],
            OH=osz[2], OW=osz[3], mode="ES_RESIZE_NEAREST" if mode == "nearest" else
            "ES_RESIZE_LINEAR", coord=COORD[coord], nearest=NEAREST[nearest], sh=float(sc[2]),
            sw=float(sc[3]))])])
    L.bind(node.output[0], y, osz)
