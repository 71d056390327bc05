"""Train a zoo model on its data set and keep the checkpoint in the user's cache.

    python examples/zoo/train.py NAME [--size S] [--epochs E] [--data digits|shapes]
    python examples/zoo/train.py --missing            # every model whose checkpoint is missing

Writes ``$XDG_CACHE_HOME/edgesmith/zoo/NAME-DATASIZE.pt`` (a state dict, loadable with
``edgesmith build CKPT --arch examples/zoo/FILE.py:CALLABLE``) and a ``.json`` beside it
with the accuracy reached, the epochs, the data and the exact build command. A checkpoint
that exists is kept (``--force`` retrains). Training uses edgesmith's own loop
(``edgesmith.compress.train.fit``); the best epoch is chosen on the calibration split and
the accuracy reported on the validation split, which training never saw. Each model trains
with its catalog entry's recipe (``catalog.Entry``: optimizer, lr, epochs, warm-up, weight
decay, label smoothing, batch); the JSON records it. Sample counts are data.py's
(``$EDGESMITH_ZOO_SAMPLES`` overrides them).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from catalog import ZOO, Entry, cache_dir, default_size  # noqa: E402

from edgesmith.artifact import write_bytes_atomic  # noqa: E402
from edgesmith.compress.train import evaluate, fit  # noqa: E402
from edgesmith.errors import EdgesmithError, UsageError  # noqa: E402
from edgesmith.pipeline import data as pipeline_data  # noqa: E402
from edgesmith.pipeline import model as pipeline_model  # noqa: E402


def _channels_last(model: torch.nn.Module) -> Any:
    """Train in channels-last layout: PyTorch's CPU depthwise/conv backward is 5-25x
    faster in it. The state dict is the same; the hook is removed after training."""
    model.to(memory_format=torch.channels_last)
    return model.register_forward_pre_hook(
        lambda _m, args: (args[0].contiguous(memory_format=torch.channels_last), *args[1:]))


def _zero_head(model: torch.nn.Module) -> None:
    """Start the classifier (the model's last Linear) at zero: every class begins at the
    same logit, so the first steps learn features instead of undoing a random head (a
    training choice; the architecture is unchanged)."""
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears:
        raise UsageError("zero_head: the model has no Linear layer to start at zero")
    with torch.no_grad():
        linears[-1].weight.zero_()
        if linears[-1].bias is not None:
            linears[-1].bias.zero_()


def train(entry: Entry, size: int, *, epochs: int, data: str | None = None,
          out_dir: Path | None = None, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Train ``entry`` at ``size`` with its recipe and write NAME-DATASIZE.pt/.json; returns
    the JSON."""
    if data:
        entry = Entry(**{**entry.__dict__, "data": data})
    out_dir = out_dir or cache_dir()
    arch, data_ref = entry.arch(size), entry.data_ref(size)
    splits = pipeline_data.load(data_ref, seed=seed)
    model = pipeline_model.load(arch).torch_model
    if entry.zero_head:
        _zero_head(model)
    hook = _channels_last(model) if splits.train_x.ndim == 4 else None
    report = (lambda p: print(f"  epoch {p['epoch']}/{p['epochs']}: loss {p['loss']:.4f}, "
                              f"calib top-1 {p['selection_accuracy'] * 100:.1f} %", flush=True)
              ) if progress else None
    result = fit(model, splits, epochs=epochs, lr=entry.lr, optimizer=entry.optimizer,
                 seed=seed, patience=epochs, progress=report, **entry.recipe())
    if hook is not None:
        hook.remove()
        model.to(memory_format=torch.contiguous_format)
    model.eval()
    val = evaluate(model, splits.val_x, splits.val_y)
    return _save(entry, size, model, splits, result, val, out_dir, data_ref, arch)


def _save(entry: Entry, size: int, model: torch.nn.Module, splits: Any, result: dict[str, Any],
          val: float, out_dir: Path, data_ref: str, arch: str) -> dict[str, Any]:
    import io

    stem = entry.stem(size)
    ckpt = out_dir / f"{stem}.pt"
    buf = io.BytesIO()
    torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, buf)
    info = {
        "model": entry.name, "arch": arch, "data": data_ref, "input_shape":
            list(splits.train_x.shape[1:]), "num_classes": int(splits.num_classes),
        "samples": {"train": len(splits.train_x), "calib": len(splits.calib_x),
                    "val": len(splits.val_x)},
        "val_accuracy": round(val, 4), "chance": round(1 / splits.num_classes, 4),
        "calib_accuracy_best": round(result["best_selection_accuracy"], 4),
        "epochs": result["epochs"], "epochs_run": result["epochs_run"],
        "best_epoch": result["best_epoch"], "optimizer": entry.optimizer, "lr": entry.lr,
        "recipe": {**entry.recipe(), "zero_head": entry.zero_head},
        "seconds": result["seconds"], "history": result["history"],
        "torch": torch.__version__, "cpu": platform.processor() or platform.machine(),
        "checkpoint": str(ckpt),
        "build": f"edgesmith build {ckpt} --arch {arch} --data {data_ref} --profile host "
                 f"--out build/zoo/{stem}",
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(ckpt, buf.getvalue())
    write_bytes_atomic(out_dir / f"{stem}.json", (json.dumps(info, indent=2) + "\n").encode())
    return info


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("name", nargs="?", choices=sorted(ZOO), help="zoo model")
    p.add_argument("--size", type=int, help="input size (default: the smallest the model has)")
    p.add_argument("--epochs", type=int, help="epochs (default: the model's own)")
    p.add_argument("--data", choices=("digits", "shapes"), help="image data set to train on")
    p.add_argument("--out", type=Path, help="checkpoint folder (default: the cache)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: on a shared machine more threads spin "
                        "and train slower)")
    p.add_argument("--force", action="store_true", help="retrain even if the checkpoint exists")
    p.add_argument("--missing", action="store_true",
                   help="train every zoo model (smallest size) whose checkpoint is missing")
    args = p.parse_args(argv)
    if not args.name and not args.missing:
        p.error("name a zoo model, or pass --missing")
    return args


def _check(entry: Entry, size: int, data: str | None) -> None:
    if size not in entry.sizes:
        raise UsageError(f"{entry.name} has no input size {size}",
                         fix=f"use --size {' or '.join(str(s) for s in entry.sizes)}")
    if data and entry.data == "keywords":
        raise UsageError(f"{entry.name} trains on keyword features, not {data} images",
                         fix="drop --data")


def _one(entry: Entry, size: int, args: argparse.Namespace) -> None:
    _check(entry, size, args.data)
    stem = Entry(**{**entry.__dict__, "data": args.data or entry.data}).stem(size)
    out = args.out or cache_dir()
    if (out / f"{stem}.pt").is_file() and (out / f"{stem}.json").is_file() and not args.force:
        print(f"{stem}: kept {out / f'{stem}.pt'} (--force retrains)")
        return
    epochs = entry.epochs if args.epochs is None else args.epochs
    print(f"{stem}: training {epochs} epoch(s) on {torch.get_num_threads()} thread(s)",
          flush=True)
    start = time.perf_counter()
    info = train(entry, size, epochs=epochs, data=args.data, out_dir=out)
    print(f"{stem}: val top-1 {info['val_accuracy'] * 100:.2f} % on {info['samples']['val']} "
          f"samples (chance {info['chance'] * 100:.1f} %), best epoch {info['best_epoch']}/"
          f"{epochs}, {time.perf_counter() - start:.0f} s -> {info['checkpoint']}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    torch.set_num_threads(max(1, args.threads))
    try:
        if args.missing:
            for entry in ZOO.values():
                _one(entry, default_size(entry), args)
        else:
            entry = ZOO[args.name]
            _one(entry, default_size(entry) if args.size is None else args.size, args)
    except EdgesmithError as e:
        print(f"error: {e.message()}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
