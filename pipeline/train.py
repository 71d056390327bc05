"""``torchrun ... -m edgesmith.pipeline.train``: fine-tune a model on one or many
processes (DDP when torchrun starts several). The training loop is ``compress.train``;
this entry point loads the model and data references, so it lives in the pipeline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch.distributed as dist

from edgesmith.artifact import write_json_atomic
from edgesmith.compress.train import fit, rank
from edgesmith.errors import EdgesmithError, UsageError

from . import data as data_mod
from . import model as model_mod


def main(argv: list[str] | None = None) -> int:
    """``torchrun ... -m edgesmith.pipeline.train``: train a model, rank 0 writes the results."""
    p = argparse.ArgumentParser(prog="python -m edgesmith.pipeline.train",
                                description="Train/fine-tune a model, optionally under torchrun.")
    p.add_argument("--model", required=True, help="file.py:callable, module:callable or .pt")
    p.add_argument("--arch", default=None, help="architecture for a state-dict .pt")
    p.add_argument("--data", default="digits")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--patience", type=int, default=5)
    p.add_argument("--out", type=Path, required=True, help="JSON results (rank 0)")
    p.add_argument("--save", type=Path, default=None, help="state dict of the best epoch (rank 0)")
    args = p.parse_args(argv)

    try:
        loaded = model_mod.load(args.model, arch=args.arch)
        if loaded.torch_model is None or loaded.kind != "torch":
            raise UsageError(f"{args.model} is not a trainable torch module")
        splits = data_mod.load(args.data, seed=args.seed)
        res = fit(loaded.torch_model, splits, epochs=args.epochs, lr=args.lr,
                  optimizer=args.optimizer, batch_size=args.batch_size, seed=args.seed,
                  patience=args.patience, checkpoint=args.save)
    except EdgesmithError as e:
        print(f"error: {e.message()}", file=sys.stderr)
        return e.exit_code
    if rank() == 0:
        res["train_samples"] = len(splits.train_x)
        write_json_atomic(args.out, res)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
