"""Progress events: the pipeline says what it is doing; the CLI decides how to show it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class StageOutcome:
    """What a stage ended as, when it ends without raising: a target whose converter
    failed or whose output was rejected is caught inside its stage (the other targets
    go on), so the stage itself must be told, or the display would tick it as done."""

    failed: bool = False

    def fail(self) -> None:
        self.failed = True


class Events:
    """No-op base. The CLI subclasses it with a rich display; tests use it as is."""

    @contextmanager
    def stage(self, name: str, detail: str = "") -> Iterator[StageOutcome]:
        yield StageOutcome()

    def info(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        pass

    def epoch(self, stage: str, epoch: int, total: int, **figures: float) -> None:
        pass
