"""Progress events: the pipeline says what it is doing; the CLI decides how to show it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class Events:
    """No-op base. The CLI subclasses it with a rich display; tests use it as is."""

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[None]:
        yield

    def info(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass

    def epoch(self, stage: str, epoch: int, total: int, **figures: float) -> None:
        pass
