"""What the zoo holds: each model's file, the callable ``--arch`` takes per input size, the
data set it trains on, and how it trains. train.py and benchmarks/zoo.py read this table;
nothing else lists the zoo."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Entry:
    name: str
    file: str                      # beside this file
    data: str                      # digits | shapes | keywords
    sizes: tuple[int, ...]         # input sizes with a ready --arch callable (0: 1-D input)
    arch_fn: str = "build"         # "{size}" is replaced by the input size
    optimizer: str = "adamw"       # converges in few epochs from scratch, for every family
    lr: float = 2e-3
    epochs: int = 15               # the README figures' epochs: ~8 min each on a shared CPU
    note: str = ""
    # the recipe's other knobs; the defaults are the loop every checkpoint before was trained
    # with (so only an entry that sets one trains differently)
    warmup_epochs: float = 0.0     # linear lr ramp before the cosine decay
    weight_decay: float | None = None  # None: the optimizer's default (adamw 1e-4)
    label_smoothing: float = 0.0
    batch_size: int = 64
    zero_head: bool = False        # start the last Linear at zero (train.py), see below

    def recipe(self) -> dict[str, Any]:
        """The training choices beyond optimizer/lr/epochs, as ``fit`` takes them."""
        return {"warmup_epochs": self.warmup_epochs, "weight_decay": self.weight_decay,
                "label_smoothing": self.label_smoothing, "batch_size": self.batch_size}

    def arch(self, size: int) -> str:
        """The ``--arch`` reference for this size (an absolute path: works from any cwd)."""
        return f"{HERE / self.file}:{self.arch_fn.format(size=size)}"

    def data_ref(self, size: int) -> str:
        """The ``--data`` reference (``examples/zoo/data.py:digits96``)."""
        fn = "keywords" if self.data == "keywords" else f"{self.data}{size}"
        return f"{HERE / 'data.py'}:{fn}"

    def stem(self, size: int) -> str:
        return f"{self.name}-{self.data}{size}" if size else f"{self.name}-{self.data}"


IMAGE_SIZES = (32, 64, 96)
ZOO = {e.name: e for e in (
    Entry("mobilenetv2", "mobilenetv2.py", "digits", IMAGE_SIZES),
    Entry("mobilenetv3_small", "mobilenetv3.py", "digits", IMAGE_SIZES, epochs=12),
    Entry("resnet18", "resnet18.py", "shapes", IMAGE_SIZES, epochs=10),
    # EfficientNet-B0's head starts at zero: torchvision's init (uniform 1/sqrt(classes)) is
    # sized for 1000 classes and a 7x7 map; at 10 classes and 32x32 (a 1x1 map) the logits
    # start at std 4.2 (loss 5.3) and 3 epochs reached 17.0 % val against 36.8 % from zero;
    # 20 epochs: 42.0 % -> 88.8 %. More data at the same 80k sample-steps, with the random
    # head, did not help (16000 x 5 epochs: 16.7 %).
    Entry("efficientnet_b0", "efficientnet.py", "shapes", IMAGE_SIZES, epochs=20,
          zero_head=True),
    Entry("vit_small", "vit.py", "shapes", (32, 96), "build_small_{size}", lr=1e-3,
          note="4 blocks of width 96, DeiT-tiny's structure (vit.py:build_96 is DeiT-tiny itself)"),
    Entry("kws_gru", "kws_gru.py", "keywords", (0,), lr=3e-3),
)}


def cache_dir() -> Path:
    """Where trained checkpoints live: $XDG_CACHE_HOME/edgesmith/zoo (~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgesmith" / "zoo"


def default_size(entry: Entry) -> int:
    """The size to train when none is asked: the smallest (what fits a laptop CPU)."""
    return min(entry.sizes)
