"""Train the detector on the generated scenes and cache the checkpoint.

    python examples/detect/train.py [--data DIR] [--epochs 40] [--force]

Without --data the scenes are generated first (1,200 images, seed 0) under
``$XDG_CACHE_HOME/edgesmith/detect/scenes128``. Writes
``$XDG_CACHE_HOME/edgesmith/detect/detector-scenes128.pt`` (a state dict, what
``examples/detect/model.py:build`` loads) and a ``.json`` beside it with the mAP reached,
the epochs, the time and the build command. An existing checkpoint is kept unless --force.

The split is edgesmith's own (``pipeline.data.split_indices``, seed 0, 70/10/20), so the
validation images that ``edgesmith build`` measures mAP on are images training never saw.
Training: AdamW, cosine learning rate, horizontal flips; targets FCOS-style: a box goes to
stride 8 when its longer side is <= 32 px, else to stride 16, and every cell whose centre
lies inside the box within 1.5 strides of the box centre learns it (objectness 1, its
class, l/t/r/b distances); losses: BCE for objectness and classes, GIoU + L1 for boxes.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import math
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from edgesmith.artifact import write_bytes_atomic
from edgesmith.pipeline import detection
from edgesmith.pipeline.data import split_indices

HERE = Path(__file__).resolve().parent


def _sibling(name: str) -> Any:
    """examples/detect/NAME.py under a name of its own: a bare ``import data`` would pick
    up whichever ``data`` module the process imported first."""
    key = f"edgesmith_detect_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        sys.modules[key] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[key])
    return sys.modules[key]


scenes = _sibling("data")
detector = _sibling("model")

LEVEL_SPLIT_PX = 32  # boxes whose longer side is <= this go to stride 8
CENTRE_RADIUS = 1.5  # in strides


def assign(objects: list[tuple[int, tuple]], size: int, num_classes: int,
           strides: tuple[int, ...] = detector.STRIDES) -> list[np.ndarray]:
    """Per level, a (4 + 1 + K, G, G) target map: l, t, r, b in strides, objectness 1 at
    positive cells, one-hot class. Larger boxes are written first, so where two boxes
    claim a cell the smaller one keeps it."""
    maps = [np.zeros((5 + num_classes, size // s, size // s), np.float32) for s in strides]
    for cls, (x0, y0, x1, y1) in sorted(objects, key=lambda o: -(o[1][2] - o[1][0])
                                        * (o[1][3] - o[1][1])):
        level = 0 if max(x1 - x0, y1 - y0) <= LEVEL_SPLIT_PX * size / 128 else 1
        s, m = strides[level], maps[level]
        g = m.shape[1]
        centres = (np.arange(g) + 0.5) * s
        bx, by = (x0 + x1) / 2, (y0 + y1) / 2
        cols = (centres > x0) & (centres < x1) & (np.abs(centres - bx) <= CENTRE_RADIUS * s)
        rows = (centres > y0) & (centres < y1) & (np.abs(centres - by) <= CENTRE_RADIUS * s)
        cols[min(g - 1, int(bx // s))] = rows[min(g - 1, int(by // s))] = True
        for r in np.flatnonzero(rows):
            for c in np.flatnonzero(cols):
                cx, cy = centres[c], centres[r]
                m[:4, r, c] = np.array([cx - x0, cy - y0, x1 - cx, y1 - cy]) / s
                m[4, r, c] = 1.0
                m[5:, r, c] = 0.0
                m[5 + cls, r, c] = 1.0
    return maps


def flip(objects: list[tuple[int, tuple]], size: int) -> list[tuple[int, tuple]]:
    return [(c, (size - x1, y0, size - x0, y1)) for c, (x0, y0, x1, y1) in objects]


def _boxes(ltrb: torch.Tensor) -> torch.Tensor:
    """(P, 4) l, t, r, b around a common centre -> (P, 4) x0, y0, x1, y1 (centre at 0)."""
    return torch.stack([-ltrb[:, 0], -ltrb[:, 1], ltrb[:, 2], ltrb[:, 3]], dim=1)


def giou_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    a, b = _boxes(pred), _boxes(target)
    lt, rb = torch.max(a[:, :2], b[:, :2]), torch.min(a[:, 2:], b[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(1)
    area_a, area_b = (a[:, 2:] - a[:, :2]).prod(1), (b[:, 2:] - b[:, :2]).prod(1)
    union = area_a + area_b - inter + 1e-7
    hull = (torch.max(a[:, 2:], b[:, 2:]) - torch.min(a[:, :2], b[:, :2])).prod(1) + 1e-7
    giou = inter / union - (hull - union) / hull
    return (1 - giou).sum()


def loss_fn(outputs: tuple[torch.Tensor, ...], targets: list[torch.Tensor]) -> torch.Tensor:
    total_obj = total_cls = total_box = outputs[0].new_zeros(())
    npos = sum(float(t[:, 4].sum()) for t in targets)
    for out, tgt in zip(outputs, targets, strict=True):
        total_obj = total_obj + F.binary_cross_entropy_with_logits(out[:, 4], tgt[:, 4],
                                                                   reduction="sum")
        pos = tgt[:, 4] > 0.5
        if pos.any():
            p = out.permute(0, 2, 3, 1)[pos]
            t = tgt.permute(0, 2, 3, 1)[pos]
            total_cls = total_cls + F.binary_cross_entropy_with_logits(p[:, 5:], t[:, 5:],
                                                                       reduction="sum")
            d = p[:, :4].clamp(min=0)
            total_box = total_box + 2.0 * giou_loss(d, t[:, :4]) + 0.2 * (d - t[:, :4]).abs().sum()
    return (total_obj + total_cls + total_box) / max(1.0, npos)


def _targets(labels: list[list], size: int, k: int) -> list[np.ndarray]:
    per_image = [assign(objs, size, k) for objs in labels]
    return [np.stack([m[level] for m in per_image]) for level in range(len(detector.STRIDES))]


def predict(model: torch.nn.Module, x: np.ndarray, batch: int = 64) -> list[np.ndarray]:
    model.eval()
    outs: list[list[np.ndarray]] = []
    with torch.no_grad():
        for i in range(0, len(x), batch):
            o = model(torch.from_numpy(x[i:i + batch]))
            outs.append([t.numpy() for t in o])
    return [np.concatenate([o[level] for o in outs]) for level in range(len(outs[0]))]


def fit(model: torch.nn.Module, x: np.ndarray, labels: list[list], *, epochs: int,
        lr: float = 4e-3, batch_size: int = 32, seed: int = 0,
        progress: bool = True) -> list[dict[str, float]]:
    """Train in place; returns per-epoch loss. Flipped targets are precomputed once."""
    size, k = x.shape[-1], detector.NUM_CLASSES
    plain = [torch.from_numpy(t) for t in _targets(labels, size, k)]
    flipped = [torch.from_numpy(t) for t in _targets([flip(o, size) for o in labels], size, k)]
    xt = torch.from_numpy(x)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    steps = epochs * math.ceil(len(x) / batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                pct_start=0.15)
    gen = torch.Generator().manual_seed(seed)
    model.to(memory_format=torch.channels_last)  # CPU conv backward is faster in NHWC
    history = []
    for epoch in range(epochs):
        model.train()
        t0, total = time.perf_counter(), 0.0
        for idx in torch.randperm(len(x), generator=gen).split(batch_size):
            do_flip = torch.rand(len(idx), generator=gen) < 0.5
            xb = torch.where(do_flip[:, None, None, None], xt[idx].flip(-1), xt[idx])
            tb = [torch.where(do_flip[:, None, None, None], f[idx], p[idx])
                  for p, f in zip(plain, flipped, strict=True)]
            loss = loss_fn(model(xb.contiguous(memory_format=torch.channels_last)), tb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        history.append({"epoch": epoch + 1, "loss": round(total / len(x), 4),
                        "seconds": round(time.perf_counter() - t0, 1)})
        if progress:
            print(f"  epoch {epoch + 1}/{epochs}: loss {total / len(x):.4f} "
                  f"({history[-1]['seconds']} s)", flush=True)
    model.to(memory_format=torch.contiguous_format)
    return history


def _ensure_data(path: Path | None) -> Path:
    if path is not None:
        return path
    path = detector.cache_dir() / "scenes128"
    if not (path / detection.ANNOTATIONS).is_file():
        print(f"generating 1200 scenes in {path}", flush=True)
        scenes.write(path, n=1200, size=128, seed=0)
    return path


def train(data_dir: Path | None, epochs: int, out: Path, seed: int = 0) -> dict[str, Any]:
    data_dir = _ensure_data(data_dir)
    x, labels = detection.load_coco(data_dir)
    idx = split_indices(len(x), seed)
    model = detector.arch()
    t0 = time.perf_counter()
    history = fit(model, x[idx["train"]], [labels[i] for i in idx["train"]], epochs=epochs,
                  seed=seed)
    seconds = time.perf_counter() - t0
    val_out = predict(model, x[idx["val"]])
    val_labels = [labels[i] for i in idx["val"]]
    info = {
        "data": str(data_dir), "images": len(x), "split": {k: len(v) for k, v in idx.items()},
        "val_map50": round(detection.map50(val_out, val_labels), 4),
        "val_map50_95": round(detection.map50_95(val_out, val_labels), 4),
        "epochs": epochs, "seconds": round(seconds, 1), "history": history,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(), "checkpoint": str(out),
        "build": f"edgesmith build examples/detect/model.py:build --data {data_dir} "
                 "--task detect --profile host --out build/detect",
    }
    buf = io.BytesIO()
    torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, buf)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out, buf.getvalue())
    write_bytes_atomic(out.with_suffix(".json"), (json.dumps(info, indent=2) + "\n").encode())
    return info


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, help="scenes folder (default: generate into the cache)")
    p.add_argument("--epochs", type=int, default=40,
                   help="default 40: val mAP@0.5 83.6 %% in 112 s on one idle core")
    p.add_argument("--out", type=Path, help="checkpoint path (default: the cache)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: the machine is shared)")
    p.add_argument("--force", action="store_true", help="retrain even if the checkpoint exists")
    args = p.parse_args(argv)
    out = args.out or detector.cache_dir() / detector.CHECKPOINT
    if out.is_file() and not args.force:
        print(f"{out} exists (--force retrains)")
        return 0
    torch.set_num_threads(args.threads)
    info = train(args.data, args.epochs, out)
    print(f"val mAP@0.5 {info['val_map50'] * 100:.1f} %, mAP@0.5:0.95 "
          f"{info['val_map50_95'] * 100:.1f} % on {info['split']['val']} images "
          f"after {info['epochs']} epochs ({info['seconds']:.0f} s): {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
