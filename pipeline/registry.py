"""The registry that finds every ``Target``: formats register by subclassing
(``edgesmith.target``, whose ``discover`` imports the format rooms so they do); this
module hands out one target by name and validates a profile target's options against its
format's own Options model.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from edgesmith.errors import ProfileError, UsageError
from edgesmith.target import REGISTRY, Target, discover, options_error

__all__ = ["discover", "get", "validate_options"]


def get(format: str) -> Target:
    discover()
    cls = REGISTRY.get(format)
    if cls is None:
        raise UsageError(f"no target for format {format!r}",
                         fix=f"known formats: {', '.join(sorted(REGISTRY))}")
    return cls()


def validate_options(target: Target, spec: Any, where: str) -> BaseModel:
    """Validate a profile target's ``options`` against the format's own Options model."""
    if spec.precision.value not in target.precisions:
        raise ProfileError(
            f"{target.format} does not support precision {spec.precision.value}",
            where=where, fix=f"use one of {', '.join(target.precisions)}",
        )
    try:
        return target.Options.model_validate(spec.options)
    except ValidationError as e:
        raise options_error(target, e, where) from None
