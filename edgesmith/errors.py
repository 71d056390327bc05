"""One error hierarchy, so the CLI can map every user-facing failure to an exit code.

Each error carries *what* went wrong, *where* (a file, a line, a node) and the *fix*,
because a user who hits one of these should not need to read our source to recover.
"""

from __future__ import annotations

# Exit codes are part of the CLI contract (README "Exit codes"): scripts and CI rely on them.
EXIT_OK = 0
EXIT_INPUT = 2
EXIT_BUDGET = 3
EXIT_CONVERSION = 4
EXIT_DEVICE = 5


class EdgesmithError(Exception):
    """Base of every error the CLI reports without a traceback."""

    exit_code = EXIT_INPUT

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None):
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(self.message())

    def message(self) -> str:
        head = f"{self.where}: {self.what}" if self.where else self.what
        return f"{head}\n  fix: {self.fix}" if self.fix else head


class UsageError(EdgesmithError):
    """A command-line argument that cannot be used as given."""


class ProfileError(EdgesmithError):
    """A device profile that does not parse or does not validate."""


class ModelLoadError(EdgesmithError):
    """A model reference that cannot be resolved, loaded or run."""


class DataError(EdgesmithError):
    """A data set reference that cannot be loaded or has the wrong shape."""


class UnsupportedOpError(EdgesmithError):
    """An op that a requested target cannot express; raised before any conversion."""

    exit_code = EXIT_CONVERSION


class BudgetError(EdgesmithError):
    """A measured figure outside the profile's budget (accuracy, size, latency, arena)."""

    exit_code = EXIT_BUDGET


class ConversionError(EdgesmithError):
    """A converter or a validation step failed on a well-formed input."""

    exit_code = EXIT_CONVERSION


class DeviceError(EdgesmithError):
    """A device could not be reached, refused us, or failed to run the artifact."""

    exit_code = EXIT_DEVICE
