"""Data sets for the zoo that need no download and are not trivial at real resolution.

Each public callable is a ``--data`` reference (``examples/zoo/data.py:digits96``) and
returns ``{"train": (x, y), "calib": (x, y), "val": (x, y)}``: x float32 NCHW (or N, C, T
for ``keywords``) scaled to about [-1, 1], y int64 labels, exactly balanced over the
classes, the same arrays for the same seed on every machine.

- ``digits96`` / ``digits64`` / ``digits32``: scikit-learn's bundled 8x8 digits drawn as
  3xSxS colour images: random scale (50-90 % of the frame), position, rotation (+-12 deg),
  foreground and background colours (a gradient), and sensor noise. The source digits are
  split first (70/10/20), so no validation image is a re-rendering of a training digit.
- ``shapes96`` / ``shapes64`` / ``shapes32``: ten procedurally drawn shapes (disc, ring,
  square, frame, triangle, plus, cross, star, crescent, half-disc) at random scale,
  position, rotation and colour, over a textured gradient background with clutter (line
  segments and specks in other colours, some drawn over the shape). A logistic regression
  on raw pixels scores far below a CNN on it (tests/zoo checks it).
- ``keywords``: 12 classes of 40x50 log-mel-like "utterances" (ten keywords built from a
  shared inventory of eight phonemes, some the same phonemes in another order, plus
  "silence" and "unknown"), with speaker pitch shift, speaking rate, onset time, gain and
  background noise: order in time decides the class, which a recurrent net can learn.

Sample counts: ``EDGESMITH_ZOO_SAMPLES="TRAIN,CALIB,VAL"`` (default per set below), or
call ``digits(size, n_train, n_calib, n_val, seed)`` and friends directly.

The ``--data`` callables keep what they generate in the user's cache
(``$XDG_CACHE_HOME/edgesmith/zoo/data``, or ``$EDGESMITH_ZOO_DATA_CACHE``; ``off`` turns
it off), keyed by this file's hash, the torch and numpy versions and the arguments:
rendering digits96 took about a fifth of a MobileNetV2-96 build's CPU time, and every
build of every model at that size asked for the same arrays. A cache file that does not
read back whole is generated again and replaced, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

Split = tuple[np.ndarray, np.ndarray]
SPLITS = ("train", "calib", "val")
# default (train, calib, val) sample counts; val is large enough that one flipped
# prediction moves accuracy by 0.1 pt, not the 2 pt of a 51-sample split
DEFAULT_COUNTS = {"digits": (3000, 200, 1000), "shapes": (4000, 200, 1000),
                  "keywords": (6000, 300, 1200)}
SAMPLES_ENV = "EDGESMITH_ZOO_SAMPLES"


def counts(kind: str) -> tuple[int, int, int]:
    """(train, calib, val) for ``kind``: $EDGESMITH_ZOO_SAMPLES or the default."""
    raw = os.environ.get(SAMPLES_ENV, "").strip()
    if not raw:
        return DEFAULT_COUNTS[kind]
    try:
        parts = tuple(int(p) for p in raw.split(","))
    except ValueError:
        parts = ()
    if len(parts) != 3 or min(parts) < 1:
        raise ValueError(f"{SAMPLES_ENV}={raw!r}: expected three positive integers "
                         "TRAIN,CALIB,VAL, e.g. 600,100,200")
    return parts  # type: ignore[return-value]


def _balanced_labels(n: int, classes: int, rng: np.random.Generator) -> np.ndarray:
    """n labels, each class n/classes times (the remainder to the first classes), shuffled."""
    y = np.arange(n) % classes
    return rng.permutation(y).astype(np.int64)


def _split_seed(seed: int, split: str) -> int:
    return seed * 1009 + SPLITS.index(split) * 7919 + 17


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- colours and backgrounds ----------------------------------------------------------

def _luma(rgb: torch.Tensor) -> torch.Tensor:
    return rgb @ torch.tensor([0.299, 0.587, 0.114])


def _colours(bg_mean: torch.Tensor, g: torch.Generator, min_contrast: float = 0.3) -> torch.Tensor:
    """One random colour per sample, brighter than the background by at least
    ``min_contrast`` in luminance (a colour too close is lifted). One polarity (bright on
    darker) keeps the sets learnable in a few CPU epochs; hue is free."""
    fg = 0.45 + torch.rand(len(bg_mean), 3, generator=g) * 0.55
    lift = (min_contrast - (_luma(fg) - _luma(bg_mean))).clamp(min=0)
    return (fg + lift[:, None]).clamp(0, 1)


def _background(n: int, size: int, g: torch.Generator, texture: float) -> torch.Tensor:
    """A two-colour linear gradient in a random direction plus smooth low-frequency noise,
    drawn at 16x16 and upsampled once (both are smooth; full-resolution maths is slow)."""
    a, b = torch.rand(n, 3, 1, 1, generator=g) * 0.5, torch.rand(n, 3, 1, 1, generator=g) * 0.5
    b = a + (b - a) * 0.6  # keep the gradient gentle, so the object has contrast
    theta = torch.rand(n, generator=g) * 2 * math.pi
    lin = torch.linspace(-1, 1, 16)
    yy, xx = torch.meshgrid(lin, lin, indexing="ij")
    t = (xx[None] * theta.cos()[:, None, None] + yy[None] * theta.sin()[:, None, None]) / 2 + 0.5
    coarse = F.interpolate(torch.randn(n, 3, 4, 4, generator=g) * texture, size=(16, 16),
                           mode="bicubic", align_corners=True)
    return F.interpolate(a + (b - a) * t[:, None] + coarse, size=(size, size), mode="bilinear",
                         align_corners=True)


def _finish(img: torch.Tensor, g: torch.Generator, max_noise: float = 0.08) -> np.ndarray:
    """Sensor noise of a random strength per image, clip to [0, 1], scale to [-1, 1]."""
    sigma = torch.rand(len(img), 1, 1, 1, generator=g) * max_noise
    img = img.add_(torch.randn(img.shape, generator=g).mul_(sigma)).clamp_(0, 1)
    return img.sub_(0.5).mul_(2.0).numpy()


@contextmanager
def _one_thread() -> Iterator[None]:
    """Generate on one thread: the ops are small, and torch's thread pool spends more on
    waking threads than it gains (5-7x more CPU time with 2 threads on a busy machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _chunked(render: Callable[[np.ndarray, int, torch.Generator], np.ndarray],
             inputs: np.ndarray, size: int, g: torch.Generator, chunk: int = 128) -> np.ndarray:
    """``render`` the samples of ``inputs`` chunk by chunk into one (N, 3, size, size) array:
    small chunks stay in the CPU's cache, which makes the per-pixel maths faster than one
    big batch."""
    out = np.empty((len(inputs), 3, size, size), np.float32)
    for i in range(0, len(inputs), chunk):
        out[i:i + chunk] = render(inputs[i:i + chunk], size, g)
    return out


def _affine(n: int, g: torch.Generator, scale: tuple[float, float], rot_deg: float
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per sample: scale (object size / frame), rotation (radians), centre in [-1, 1]
    such that the object stays inside the frame."""
    s = scale[0] + torch.rand(n, generator=g) * (scale[1] - scale[0])
    rot = (torch.rand(n, generator=g) * 2 - 1) * math.radians(rot_deg)
    room = (1 - s).clamp(min=0)
    centre = (torch.rand(n, 2, generator=g) * 2 - 1) * room[:, None]
    return s, rot, centre


# --- digits ---------------------------------------------------------------------------

def _digit_sources(seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """sklearn's 1797 digits split 70/10/20 by a seeded permutation, before any rendering."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    order = np.random.default_rng(seed).permutation(len(bunch.target))
    cut1, cut2 = int(len(order) * 0.7), int(len(order) * 0.8)
    parts = {"train": order[:cut1], "calib": order[cut1:cut2], "val": order[cut2:]}
    return {k: (bunch.images[i].astype(np.float32) / 16.0, bunch.target[i]) for k, i in
            parts.items()}


def _render_digits(images: np.ndarray, size: int, g: torch.Generator) -> np.ndarray:
    n = len(images)
    glyph = torch.from_numpy(images)[:, None]  # N,1,8,8 in [0, 1]
    s, rot, centre = _affine(n, g, (0.5, 0.9), 12)
    # the inverse map: output pixel -> glyph coordinate
    cos, sin = rot.cos() / s, rot.sin() / s
    theta = torch.stack([torch.stack([cos, -sin, -(cos * centre[:, 0] - sin * centre[:, 1])], 1),
                         torch.stack([sin, cos, -(sin * centre[:, 0] + cos * centre[:, 1])], 1)],
                        1)
    grid = F.affine_grid(theta, [n, 1, size, size], align_corners=False)
    mask = F.grid_sample(glyph, grid, mode="bilinear", padding_mode="zeros",
                         align_corners=False).clamp(0, 1)
    bg = _background(n, size, g, texture=0.08)
    fg = _colours(bg.mean(dim=(2, 3)), g, min_contrast=0.4)[:, :, None, None]
    return _finish(bg * (1 - mask) + fg * mask, g)


@_one_thread()
def digits(size: int = 96, n_train: int = 3000, n_calib: int = 200, n_val: int = 1000,
           seed: int = 0) -> dict[str, Split]:
    """The digits as 3 x size x size colour images; see the module docstring."""
    sources = _digit_sources(seed)
    out = {}
    for split, n in zip(SPLITS, (n_train, n_calib, n_val), strict=True):
        rng = np.random.default_rng(_split_seed(seed, split))
        images, labels = sources[split]
        y = _balanced_labels(n, 10, rng)
        pick = np.array([rng.choice(np.flatnonzero(labels == c)) for c in y], dtype=np.int64)
        g = _generator(_split_seed(seed, split))
        out[split] = (_chunked(_render_digits, images[pick], size, g), y)
    return out


# --- shapes ---------------------------------------------------------------------------

SHAPES = ("disc", "ring", "square", "frame", "triangle", "plus", "cross", "star", "crescent",
          "half-disc")


def _box(x: torch.Tensor, y: torch.Tensor, hw: float, hh: float) -> torch.Tensor:
    return torch.maximum(x.abs() - hw, y.abs() - hh)


def _ngon(x: torch.Tensor, y: torch.Tensor, sides: int, inradius: float) -> torch.Tensor:
    d = None
    for k in range(sides):
        a = math.pi / 2 + 2 * math.pi * k / sides
        e = x * math.cos(a) + y * math.sin(a) - inradius
        d = e if d is None else torch.maximum(d, e)
    return d


def _star(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    r, a = torch.hypot(x, y), torch.atan2(y, x) + math.pi / 2
    t = torch.remainder(a * 5 / (2 * math.pi), 1.0)
    return r - (0.42 + 0.58 * (1 - 2 * (t - 0.5).abs()))


def _shape_sdf(cls: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Signed distance (in object units, object radius 1) of class ``cls`` at (x, y)."""
    r = torch.hypot(x, y)
    c45, s45 = math.cos(math.pi / 4), math.sin(math.pi / 4)
    xr, yr = x * c45 - y * s45, x * s45 + y * c45
    sdf = {
        0: lambda: r - 0.95,
        1: lambda: (r - 0.72).abs() - 0.26,
        2: lambda: _box(x, y, 0.8, 0.8),
        3: lambda: (torch.maximum(x.abs(), y.abs()) - 0.66).abs() - 0.2,
        4: lambda: _ngon(x, -y - 0.2, 3, 0.5),
        5: lambda: torch.minimum(_box(x, y, 0.95, 0.26), _box(x, y, 0.26, 0.95)),
        6: lambda: torch.minimum(_box(xr, yr, 0.95, 0.24), _box(xr, yr, 0.24, 0.95)),
        7: lambda: _star(x, y),
        8: lambda: torch.maximum(r - 0.95, -(torch.hypot(x - 0.45, y) - 0.78)),
        9: lambda: torch.maximum(r - 0.95, y - 0.15),
    }[cls]
    return sdf()


def _coverage(sdf: torch.Tensor, pixel: torch.Tensor) -> torch.Tensor:
    """Anti-aliased coverage of a shape from its signed distance and the pixel size."""
    return (0.5 - sdf / pixel).clamp(0, 1)


def _frame_coords(n: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    lin = (torch.arange(size, dtype=torch.float32) + 0.5) / size * 2 - 1
    yy, xx = torch.meshgrid(lin, lin, indexing="ij")
    return xx.expand(n, size, size), yy.expand(n, size, size)


def _segments(n: int, size: int, g: torch.Generator, count: int) -> torch.Tensor:
    """Coverage of ``count`` thin random line segments per image: (count, N, S, S)."""
    xx, yy = _frame_coords(n, size)
    pixel = 2.0 / size
    out = []
    for _ in range(count):
        p, q = torch.rand(n, 2, generator=g) * 2 - 1, torch.rand(n, 2, generator=g) * 2 - 1
        width = pixel * (0.6 + torch.rand(n, generator=g) * 1.2)
        d = q - p
        t = (((xx - p[:, 0, None, None]) * d[:, 0, None, None]
              + (yy - p[:, 1, None, None]) * d[:, 1, None, None])
             / (d * d).sum(1).clamp(min=1e-6)[:, None, None]).clamp(0, 1)
        dist = torch.hypot(xx - p[:, 0, None, None] - t * d[:, 0, None, None],
                           yy - p[:, 1, None, None] - t * d[:, 1, None, None])
        out.append(_coverage(dist - width[:, None, None] / 2, torch.tensor(pixel)))
    return torch.stack(out)


def _specks(n: int, size: int, g: torch.Generator, count: int) -> torch.Tensor:
    """Coverage of ``count`` small discs per image (smaller than any target shape)."""
    xx, yy = _frame_coords(n, size)
    out = []
    for _ in range(count):
        c = torch.rand(n, 2, generator=g) * 2 - 1
        rad = 0.03 + torch.rand(n, generator=g) * 0.05
        d = torch.hypot(xx - c[:, 0, None, None], yy - c[:, 1, None, None]) - rad[:, None, None]
        out.append(_coverage(d, torch.tensor(2.0 / size)))
    return torch.stack(out)


def _paint(img: torch.Tensor, cover: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Paint coverage layers (L, N, S, S) over ``img``, each in its own random colour;
    where layers overlap the most opaque one wins (one blend, not one per layer)."""
    alpha, top = cover.max(dim=0)
    colours = torch.rand(len(cover), len(img), 3, generator=g)
    colour = colours[top, torch.arange(len(img))[:, None, None]].permute(0, 3, 1, 2)
    return img.add_((colour - img).mul_(alpha[:, None]))


def _render_shapes(y: np.ndarray, size: int, g: torch.Generator) -> np.ndarray:
    n = len(y)
    s, rot, centre = _affine(n, g, (0.3, 0.75), 15)
    xx, yy = _frame_coords(n, size)
    dx, dy = xx - centre[:, 0, None, None], yy - centre[:, 1, None, None]
    cos, sin = rot.cos()[:, None, None], rot.sin()[:, None, None]
    # object coordinates: undo the position, the rotation and the scale
    ox, oy = (cos * dx + sin * dy) / s[:, None, None], (-sin * dx + cos * dy) / s[:, None, None]
    sdf = torch.empty(n, size, size)
    yt = torch.from_numpy(y)
    for cls in range(len(SHAPES)):
        sel = yt == cls
        if sel.any():
            sdf[sel] = _shape_sdf(cls, ox[sel], oy[sel])
    shape = _coverage(sdf, (2.0 / size / s)[:, None, None])
    bg = _background(n, size, g, texture=0.25)
    img = _paint(bg, torch.cat([_segments(n, size, g, 4), _specks(n, size, g, 3)]), g)
    fg = _colours(img.mean(dim=(2, 3)), g, min_contrast=0.25)[:, :, None, None]
    img = img.add_((fg - img).mul_(shape[:, None]))
    img = _paint(img, _segments(n, size, g, 1), g)  # clutter over the object too
    return _finish(img, g)


@_one_thread()
def shapes(size: int = 96, n_train: int = 4000, n_calib: int = 200, n_val: int = 1000,
           seed: int = 0) -> dict[str, Split]:
    """Ten shapes in clutter as 3 x size x size colour images; see the module docstring."""
    out = {}
    for split, n in zip(SPLITS, (n_train, n_calib, n_val), strict=True):
        rng = np.random.default_rng(_split_seed(seed, split))
        y = _balanced_labels(n, len(SHAPES), rng)
        g = _generator(_split_seed(seed, split))
        out[split] = (_chunked(_render_shapes, y, size, g), y)
    return out


# --- keywords -------------------------------------------------------------------------

MEL_BINS, FRAMES, PHONEMES = 40, 50, 8
# ten keywords over eight phonemes; several share phonemes in another order, so the
# order in time decides the class (0-9), then 10 = silence, 11 = unknown
KEYWORDS = ((0, 1), (1, 0), (2, 3, 4), (4, 3, 2), (5, 6), (6, 5, 7), (0, 2, 5),
            (5, 2, 0), (7, 1, 3), (3, 7, 1))
KEYWORD_CLASSES = len(KEYWORDS) + 2


def _phoneme_templates(rng: np.random.Generator) -> np.ndarray:
    """Eight spectral templates over the mel bins: two or three formant bumps each, and
    two broadband (fricative-like) ones. Fixed by the data set's own seed, not the
    caller's, so every split and seed speaks the same language."""
    bins = np.arange(MEL_BINS)[None]
    out = np.zeros((PHONEMES, MEL_BINS), np.float32)
    for p in range(PHONEMES):
        if p in (3, 7):  # fricatives: energy rising towards high frequencies
            out[p] = 0.2 + 0.8 * (bins[0] / MEL_BINS) ** (1.5 if p == 3 else 3)
            continue
        centres = np.sort(rng.uniform(3, MEL_BINS - 4, size=rng.integers(2, 4)))
        for c in centres:
            out[p] += np.exp(-0.5 * ((bins[0] - c) / rng.uniform(1.5, 3.0)) ** 2)
    return out / out.max(axis=1, keepdims=True)


_TEMPLATES = _phoneme_templates(np.random.default_rng(20240515))


def _unknown_word(rng: np.random.Generator) -> tuple[int, ...]:
    while True:
        word = tuple(int(p) for p in rng.integers(0, PHONEMES, size=rng.integers(2, 4)))
        if word not in KEYWORDS:
            return word


def _utterance(word: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Log-energy frames (MEL_BINS, FRAMES) of one spoken word over background noise."""
    spec = np.zeros((MEL_BINS, FRAMES), np.float32)
    shift = int(rng.integers(-2, 3))  # speaker: formants up or down a few bins
    durations = rng.integers(5, 11, size=len(word))
    t = int(rng.integers(0, max(1, FRAMES - int(durations.sum()))))
    gain = rng.uniform(0.6, 1.4)
    for p, d in zip(word, durations, strict=True):
        env = np.sin(np.linspace(0.15, math.pi - 0.15, d)) * gain * rng.uniform(0.8, 1.2)
        stop = min(FRAMES, t + d)
        spec[:, t:stop] += np.roll(_TEMPLATES[p], shift)[:, None] * env[None, :stop - t]
        t = stop + int(rng.integers(0, 2))
    noise_floor = rng.uniform(0.02, 0.3) * (0.5 + rng.random((MEL_BINS, 1)))
    spec += noise_floor + np.abs(rng.normal(0, 0.08, size=spec.shape))
    return np.log(spec + 1e-3).astype(np.float32)


def _word_for(label: int, rng: np.random.Generator) -> tuple[int, ...]:
    if label < len(KEYWORDS):
        return KEYWORDS[label]
    return () if label == len(KEYWORDS) else _unknown_word(rng)


@_one_thread()
def keyword_features(n_train: int = 6000, n_calib: int = 300, n_val: int = 1200,
                     seed: int = 0) -> dict[str, Split]:
    """Keyword "utterances" as (N, 40, 50) features; see the module docstring."""
    out = {}
    for split, n in zip(SPLITS, (n_train, n_calib, n_val), strict=True):
        rng = np.random.default_rng(_split_seed(seed, split))
        y = _balanced_labels(n, KEYWORD_CLASSES, rng)
        x = np.stack([_utterance(_word_for(int(c), rng), rng) for c in y]) if n else \
            np.zeros((0, MEL_BINS, FRAMES), np.float32)
        out[split] = (((x + 2.5) / 2.0).astype(np.float32), y)  # about [-1, 1]
    return out


# --- the --data callables --------------------------------------------------------------

CACHE_ENV = "EDGESMITH_ZOO_DATA_CACHE"


def cache_dir() -> Path | None:
    """Where generated sets are kept: $EDGESMITH_ZOO_DATA_CACHE (``off``: nowhere), else
    $XDG_CACHE_HOME/edgesmith/zoo/data (~/.cache/...), beside the zoo's checkpoints."""
    raw = os.environ.get(CACHE_ENV, "").strip()
    if raw.lower() in ("off", "0", "no", "false"):
        return None
    if raw:
        return Path(raw)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgesmith" / \
        "zoo" / "data"


def _cache_key(make: Callable[..., dict[str, Split]], kw: dict) -> str:
    """Everything the arrays depend on: this file (the generators), the libraries whose
    random streams and maths draw them, and the arguments."""
    parts = {"fn": make.__name__, "kw": kw, "torch": torch.__version__, "numpy": np.__version__,
             "source": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def _read_cached(path: Path) -> dict[str, Split] | None:
    """The splits in ``path``, or None when it is missing or does not read back whole
    (truncated, bit rot: the zip's CRC check fails, or a split is missing)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: (f[f"{k}_x"], f[f"{k}_y"]) for k in SPLITS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None


def _write_cached(path: Path, sets: dict[str, Split]) -> None:
    """Write atomically (temp file in the same folder, then rename): a killed build or two
    builds at once never leave a half-written file under the final name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.stem, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{f"{k}_{a}": v for k, (x, y) in sets.items()
                           for a, v in (("x", x), ("y", y))})
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cached(make: Callable[..., dict[str, Split]], **kw) -> dict[str, Split]:
    """``make(**kw)``, read from the cache when it was generated before (the same arrays,
    bit for bit), else generated and stored. An unwritable cache only costs the time."""
    folder = cache_dir()
    if folder is None:
        return make(**kw)
    path = folder / f"{make.__name__}-{_cache_key(make, kw)}.npz"
    sets = _read_cached(path)
    if sets is None:
        sets = make(**kw)
        try:
            _write_cached(path, sets)
        except OSError:
            pass  # a read-only or full disk: the arrays are right, only not kept
    return sets


def _sized(make: Callable[..., dict[str, Split]], kind: str, **kw) -> dict[str, Split]:
    n_train, n_calib, n_val = counts(kind)
    return cached(make, n_train=n_train, n_calib=n_calib, n_val=n_val, seed=0, **kw)


def digits96() -> dict[str, Split]:
    return _sized(digits, "digits", size=96)


def digits64() -> dict[str, Split]:
    return _sized(digits, "digits", size=64)


def digits32() -> dict[str, Split]:
    return _sized(digits, "digits", size=32)


def shapes96() -> dict[str, Split]:
    return _sized(shapes, "shapes", size=96)


def shapes64() -> dict[str, Split]:
    return _sized(shapes, "shapes", size=64)


def shapes32() -> dict[str, Split]:
    return _sized(shapes, "shapes", size=32)


def keywords() -> dict[str, Split]:
    return _sized(keyword_features, "keywords")
