"""Camera frame -> model input, with arithmetic defined once so every path agrees.

The same steps run here (image folders, validation), in the device bench script
(``devices/remote_preprocess.py``, standard library only) and in the C harness
(``targets/runtime/es_preprocess.c``: ``es_preprocess_u8``, no malloc). The rule is chosen
so the integer part is reproducible bit for bit in C:

1. The frame is HWC uint8 with 3 channels in RGB order (Pillow decodes to RGB).
2. **resize** ``[h, w]``: bilinear, half-pixel centres (``align_corners=False``), no
   antialiasing. Per axis, output index ``d`` of ``O`` over an input of ``I`` pixels maps to
   the source coordinate ``n / (2*O)`` with ``n = (2*d + 1)*I - O`` (clamped at 0); the
   left tap is ``s0 = n // (2*O)`` (clamped to ``I-1``), the right one ``min(s0+1, I-1)``,
   the weight of the right tap ``f = ((n - s0*2*O) * 256) // (2*O)`` (0..255, Q8). A
   pixel is ``((256-fy)*((256-fx)*p00 + fx*p01) + fy*((256-fx)*p10 + fx*p11) + 32768) >> 16``
   (integers; at most 2^24, so int32 holds it). Same size in and out is the identity.
3. **center_crop** ``[h, w]``: from the (resized) frame, top ``(H-h)//2``, left
   ``(W-w)//2``; a crop larger than the frame is an error.
4. **channel_order** ``bgr`` reverses the channels (the model was trained on BGR);
   ``mean``/``std`` are listed in the model's channel order (one value: all channels).
5. **dtype** ``float32``: ``(float32(p) - mean[c]) / std[c]`` in float32 (IEEE, round to
   nearest; mean 0 / std 1 when absent). ``uint8``: the pixel as is; ``int8``: pixel - 128
   (the usual int8 image input); mean/std do not apply to these two and are refused.
6. **layout** ``nchw`` (C, H, W) or ``nhwc`` (H, W, C).

This module is numpy only (no edgesmith import), so it reads as the reference for the
two other implementations; ``preprocess_spec.py`` parses and checks the declaration.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CHANNELS = 3
Q = 256  # bilinear weights in 1/256 (Q8)
RESIZE_RULE = ("bilinear, half-pixel centres, Q8 integer weights, round half up "
               "(pipeline/preprocess.py)")


def axis_taps(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(left tap, right tap, Q8 weight of the right tap) for each output index."""
    d = np.arange(size_out, dtype=np.int64)
    n = np.maximum((2 * d + 1) * size_in - size_out, 0)
    s0 = n // (2 * size_out)
    f = ((n - s0 * 2 * size_out) * Q) // (2 * size_out)
    last = s0 >= size_in - 1
    s0 = np.where(last, size_in - 1, s0)
    f = np.where(last, 0, f)
    s1 = np.minimum(s0 + 1, size_in - 1)
    return s0, s1, f


def resize_u8(frame: np.ndarray, h: int, w: int) -> np.ndarray:
    """Bilinear resize of one HWC uint8 frame by the rule in the module docstring."""
    y0, y1, fy = axis_taps(frame.shape[0], h)
    x0, x1, fx = axis_taps(frame.shape[1], w)
    p = frame.astype(np.int64)
    fx_, fy_ = fx[None, :, None], fy[:, None, None]
    top = (Q - fx_) * p[y0][:, x0] + fx_ * p[y0][:, x1]
    bottom = (Q - fx_) * p[y1][:, x0] + fx_ * p[y1][:, x1]
    return (((Q - fy_) * top + fy_ * bottom + 32768) >> 16).astype(np.uint8)


def crop_box(h: int, w: int, crop: list[int] | None) -> tuple[int, int, int, int]:
    """(top, left, height, width) of the centre crop of an h x w frame."""
    if crop is None:
        return 0, 0, h, w
    ch, cw = crop
    if ch > h or cw > w:
        raise ValueError(f"center_crop {ch}x{cw} is larger than the {h}x{w} frame")
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def output_shape(spec: dict[str, Any], h: int, w: int) -> tuple[int, int, int]:
    """The model input's per-sample shape for an h x w frame."""
    if spec.get("resize"):
        h, w = spec["resize"]
    _, _, h, w = crop_box(h, w, spec.get("center_crop"))
    return (CHANNELS, h, w) if spec.get("layout", "nchw") == "nchw" else (h, w, CHANNELS)


def _per_channel(values: list[float] | None, default: float) -> np.ndarray:
    if not values:
        return np.full(CHANNELS, default, np.float32)
    if len(values) == 1:
        return np.full(CHANNELS, values[0], np.float32)
    return np.asarray(values, np.float32)


def apply_one(frame: np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    """One HWC uint8 RGB frame -> one model input (shape ``output_shape``)."""
    if frame.ndim != 3 or frame.shape[2] != CHANNELS or frame.dtype != np.uint8:
        raise ValueError(f"a frame must be HxWx{CHANNELS} uint8, got {frame.shape} {frame.dtype}")
    if spec.get("resize"):
        frame = resize_u8(frame, *spec["resize"])
    top, left, h, w = crop_box(frame.shape[0], frame.shape[1], spec.get("center_crop"))
    frame = frame[top:top + h, left:left + w]
    if spec.get("channel_order", "rgb") == "bgr":
        frame = frame[:, :, ::-1]
    dtype = spec.get("dtype", "float32")
    if dtype == "float32":
        mean = _per_channel(spec.get("mean"), 0.0)
        std = _per_channel(spec.get("std"), 1.0)
        out = (frame.astype(np.float32) - mean) / std
    elif dtype == "uint8":
        out = frame.copy()
    else:
        out = (frame.astype(np.int16) - 128).astype(np.int8)
    if spec.get("layout", "nchw") == "nchw":
        out = out.transpose(2, 0, 1)
    return np.ascontiguousarray(out)


def apply(frames: list[np.ndarray] | np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    """A batch of frames (sizes may differ when ``resize`` is set) -> (N, *input shape)."""
    return np.stack([apply_one(np.asarray(f), spec) for f in frames])
