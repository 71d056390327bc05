"""The bench script's declared preprocessing: raw camera frames -> model inputs -> top-1.

A part of the uploaded ``edgesmith_remote.py`` (embedded by ``devices/script.py`` like
``remote_power.py``, run in a namespace of its own with the script's API as ``rt``).
Standard library only, Python 3.8 compatible: a board with a compiler and no numpy
still scores its frames.

The arithmetic is ``pipeline/preprocess.py``'s, step for step, so the inputs made here
are the host's bit for bit: the bilinear resize in Q8 integers; float32 ``(p - mean) /
std`` as float64 operations each rounded to float32 (``p - mean`` is exact in float64,
and a float64 quotient of two float32 values rounded to float32 is the float32 quotient,
since 53 >= 2 * 24 + 2 bits), uint8 as is, int8 ``p - 128``; NCHW or NHWC. The values are
handed to the runtime as float32, as the build's inputs are.

``bench --frames INDEX.json --preprocess SPEC`` reads the build's validation frames
(``data/bench_frames.json``: the raw HWC uint8 file it names, runs of frames of one size,
one label per frame), preprocesses each frame and reports top-1 against the labels as
``result["accuracy"]``, beside parity.
"""

# ruff: noqa: B905  (zip(strict=) is Python 3.10+; this file runs on 3.8 devices)
import array
import hashlib
import json
import os
import sys

# remote.py's API, set when the script loads this part
rt = None

CHANNELS = 3
Q = 256  # bilinear weights in 1/256
SPEC_KEYS = ("resize", "center_crop", "mean", "std", "channel_order", "layout", "dtype")


# -- the spec ------------------------------------------------------------------------------------
def _hw(spec, key):
    value = spec.get(key)
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and v > 0 for v in value)):
        raise ValueError(f"preprocess {key} must be [height, width] of positive integers, "
                         f"got {value!r}")
    return value


def _per_channel(values, default, key):
    if not values:
        return [default] * CHANNELS
    if len(values) not in (1, CHANNELS):
        raise ValueError(f"preprocess {key} has {len(values)} values; expected 1 or {CHANNELS}")
    values = [float(v) for v in values] * (CHANNELS if len(values) == 1 else 1)
    return list(array.array("f", values))  # float32, as numpy holds them


def checked(spec):
    """The spec as this part reads it; a ValueError names a key it cannot read."""
    if not isinstance(spec, dict):
        raise ValueError(f"the preprocess spec must be a JSON object, got {spec!r}")
    unknown = sorted(k for k in spec if k not in SPEC_KEYS)
    if unknown:
        raise ValueError(f"preprocess: unknown key(s) {', '.join(unknown)}")
    order = spec.get("channel_order") or "rgb"
    layout = spec.get("layout") or "nchw"
    dtype = spec.get("dtype") or "float32"
    if order not in ("rgb", "bgr") or layout not in ("nchw", "nhwc") \
            or dtype not in ("float32", "uint8", "int8"):
        raise ValueError(f"preprocess: channel_order {order!r}, layout {layout!r} or dtype "
                         f"{dtype!r} is not one of rgb|bgr, nchw|nhwc, float32|uint8|int8")
    std = _per_channel(spec.get("std"), 1.0, "std")
    if any(not s > 0 for s in std):
        raise ValueError(f"preprocess: every std must be > 0, got {spec.get('std')!r}")
    return {"resize": _hw(spec, "resize"), "center_crop": _hw(spec, "center_crop"),
            "mean": _per_channel(spec.get("mean"), 0.0, "mean"), "std": std,
            "bgr": order == "bgr", "nhwc": layout == "nhwc", "dtype": dtype}


# -- one frame -----------------------------------------------------------------------------------
def axis_taps(size_in, size_out):
    """(left tap, right tap, Q8 weight of the right tap) per output index (see
    pipeline/preprocess.py)."""
    taps = []
    for d in range(size_out):
        n = max((2 * d + 1) * size_in - size_out, 0)
        s0 = n // (2 * size_out)
        f = ((n - s0 * 2 * size_out) * Q) // (2 * size_out)
        if s0 >= size_in - 1:
            s0, f = size_in - 1, 0
        taps.append((s0, min(s0 + 1, size_in - 1), f))
    return taps


def _pixels(data, h, w, s):
    """The (resized, cropped) frame's channel planes as lists, RGB, row-major."""
    rh, rw = s["resize"] or (h, w)
    ch, cw = s["center_crop"] or (rh, rw)
    if ch > rh or cw > rw:
        raise ValueError(f"center_crop {ch}x{cw} is larger than the {rh}x{rw} frame")
    top, left = (rh - ch) // 2, (rw - cw) // 2
    planes = [[], [], []]
    if s["resize"] is None:
        for y in range(top, top + ch):
            row = data[(y * w + left) * CHANNELS:(y * w + left + cw) * CHANNELS]
            for c in range(CHANNELS):
                planes[c].extend(row[c::CHANNELS])
        return planes, ch, cw
    ys = axis_taps(h, rh)[top:top + ch]
    xs = axis_taps(w, rw)[left:left + cw]
    for y0, y1, fy in ys:
        r0, r1 = y0 * w * CHANNELS, y1 * w * CHANNELS
        for x0, x1, fx in xs:
            a0, a1 = x0 * CHANNELS, x1 * CHANNELS
            for c in range(CHANNELS):
                t = (Q - fx) * data[r0 + a0 + c] + fx * data[r0 + a1 + c]
                b = (Q - fx) * data[r1 + a0 + c] + fx * data[r1 + a1 + c]
                planes[c].append(((Q - fy) * t + fy * b + 32768) >> 16)
    return planes, ch, cw


def _values(plane, c, s):
    """One channel's pixels as the model's float32 values."""
    if s["dtype"] == "uint8":
        return [float(p) for p in plane]
    if s["dtype"] == "int8":
        return [float(p - 128) for p in plane]
    mean, std = s["mean"][c], s["std"][c]
    centred = array.array("f", [p - mean for p in plane])  # exact, then float32
    return list(array.array("f", [v / std for v in centred]))


def preprocess_frame(data, h, w, spec):
    """One HWC uint8 RGB frame (bytes of h*w*3) -> (flat float list, per-sample shape)."""
    if len(data) != h * w * CHANNELS:
        raise ValueError(f"a {h}x{w} frame is {h * w * CHANNELS} bytes, got {len(data)}")
    s = spec if "bgr" in spec else checked(spec)
    planes, oh, ow = _pixels(data, h, w, s)
    if s["bgr"]:
        planes = planes[::-1]
    chans = [_values(planes[c], c, s) for c in range(CHANNELS)]
    if not s["nhwc"]:
        return chans[0] + chans[1] + chans[2], (CHANNELS, oh, ow)
    flat = [0.0] * (oh * ow * CHANNELS)
    for c in range(CHANNELS):
        flat[c::CHANNELS] = chans[c]
    return flat, (oh, ow, CHANNELS)


def preprocess_frames(frames, spec):
    """[(bytes, h, w), ...] -> [(flat float list, shape), ...] by one spec."""
    s = checked(spec)
    return [preprocess_frame(data, h, w, s) for data, h, w in frames]


# -- the build's frames ------------------------------------------------------------------------
def read_index(path):
    """The frames index (``data/bench_frames.json``), checked against its raw file."""
    with open(path) as f:
        index = json.load(f)
    runs, labels = index.get("runs"), index.get("labels")
    if not isinstance(runs, list) or not isinstance(labels, list) or not all(
            isinstance(r, list) and len(r) == 3 and all(isinstance(v, int) and v > 0 for v in r)
            for r in runs):
        raise ValueError(f"{path}: runs must be [[count, height, width], ...] and labels "
                         "a list")
    count = sum(r[0] for r in runs)
    if len(labels) != count:
        raise ValueError(f"{path}: {len(labels)} labels for {count} frames")
    name = index.get("data")
    if not isinstance(name, str) or not name or os.path.basename(name) != name \
            or name in (".", ".."):
        raise ValueError(f"{path}: data must name a file beside it, got {name!r}")
    data = os.path.join(os.path.dirname(path), name)
    size = sum(n * h * w * CHANNELS for n, h, w in runs)
    if not os.path.isfile(data) or os.path.getsize(data) != size:
        raise ValueError(f"{path}: {data} should hold {size} bytes of frames")
    index["data_path"] = data
    return index


def frame_runs(index):
    """(count, h, w, bytes of those frames, their labels) per run of same-sized frames."""
    start = 0
    with open(index["data_path"], "rb") as f:
        for n, h, w in index["runs"]:
            yield n, h, w, f.read(n * h * w * CHANNELS), index["labels"][start:start + n]
            start += n


def top1(outputs, labels):
    """Correct top-1 guesses of ``outputs`` (float lists) against integer ``labels``."""
    correct = 0
    for out, label in zip(outputs, labels):
        best = max(range(len(out)), key=lambda i: (out[i], -i))  # the first maximum
        correct += best == label
    return correct


def figures(correct, frames, index, how):
    return {"top1": correct / frames if frames else None, "correct": correct,
            "frames": frames, "val_samples": index.get("val_samples"), "preprocess": how}


def _digest(h, flat):
    """Feed the float32 little-endian bytes of ``flat`` to ``h`` (as numpy's tobytes()
    gives them on the host), whatever this device's byte order."""
    data = array.array("f", flat)
    if sys.byteorder == "big":
        data.byteswap()
    h.update(data.tobytes())


def accuracy_python(args, prepare, run, to_list, sample_shape):
    """Top-1 of an in-process runtime (``prepare``/``run``/``to_list`` of its loader) on
    the build's frames, each preprocessed here; ``inputs_sha256`` hashes every input made
    (float32, little-endian, in order), so the host can tell bit for bit whether they are
    its own."""
    index = read_index(args.frames)
    spec = checked(args.preprocess)
    inputs = hashlib.sha256()
    correct = frames = 0
    for n, h, w, data, labels in frame_runs(index):
        size = h * w * CHANNELS
        for i in range(n):
            flat, shape = preprocess_frame(data[i * size:(i + 1) * size], h, w, spec)
            if tuple(shape) != tuple(sample_shape):
                raise ValueError(f"a preprocessed {h}x{w} frame is {list(shape)}; the model "
                                 f"takes {list(sample_shape)}")
            _digest(inputs, flat)
            correct += top1([to_list(run(prepare(flat)))], labels[i:i + 1])
            frames += 1
    return dict(figures(correct, frames, index, "device script (stdlib, remote_preprocess.py)"),
                inputs_sha256=inputs.hexdigest())
