"""What a device is (a name, how to reach it, its profile) and the progress events a bench
reports while it runs one."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from edgesmith.profiles.schema import Profile, Ssh


def safe_name(name: str) -> str:
    """A device name as a file name (``bench/<device>.json``)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")
    return cleaned or "device"


@dataclass
class Device:
    """One place to bench: ``ssh`` None means this machine."""

    name: str
    ssh: Ssh | None = None
    profile: Profile | None = None  # budgets and threads; None: the build's own profile

    @property
    def file_name(self) -> str:
        return safe_name(self.name) + ".json"


class BenchEvents:
    """No-op base; the CLI shows rich progress, tests may record."""

    def device_start(self, device: str, steps: int) -> None:
        pass

    def device_step(self, device: str, what: str) -> None:
        pass

    def target_done(self, device: str, result: dict[str, Any]) -> None:
        pass

    def device_done(self, device: str, result: dict[str, Any]) -> None:
        pass

    def warn(self, message: str) -> None:
        """Something the user should know while waiting (e.g. a build holds the lock)."""
