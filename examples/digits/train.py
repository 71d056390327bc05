"""Train the demo CNN on sklearn's bundled digits and save a state dict.

Usage: python examples/digits/train.py [OUT.pt]   (default: examples/digits/digits.pt)
Seeded and single-threaded, so the checkpoint is the same on every run of this machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import build  # noqa: E402

from edgesmith.pipeline.data import digits  # noqa: E402


def train(epochs: int = 30, seed: int = 0) -> tuple[nn.Module, float]:
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    splits = digits(seed)
    model = build()
    x = torch.from_numpy(splits.train_x)
    y = torch.from_numpy(splits.train_y)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4,
                          nesterov=True)
    steps = epochs * ((len(x) + 63) // 64)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(x), generator=g).split(64):
            opt.zero_grad()
            nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
            sched.step()
    model.eval()
    with torch.no_grad():
        acc = (model(torch.from_numpy(splits.val_x)).argmax(1).numpy() == splits.val_y).mean()
    return model, float(acc)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("digits.pt")
    model, acc = train()
    torch.save(model.state_dict(), out)
    print(f"trained DigitsNet: val top-1 {acc * 100:.2f}% -> {out}")


if __name__ == "__main__":
    main()
