"""The registry that finds every ``Target``: formats register by subclassing
(``edgesmith.target``); this module imports the format rooms so they do, and validates a
profile target's options against its format's own Options model.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from pydantic import BaseModel

from edgesmith.errors import ProfileError, UsageError
from edgesmith.target import REGISTRY, Target


def discover() -> dict[str, type[Target]]:
    """Import every module of the format rooms so their Target subclasses register."""
    for package in ("edgesmith.convert", "edgesmith.targets"):
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__):
            if not info.name.startswith("_"):
                importlib.import_module(f"{package}.{info.name}")
    return REGISTRY


def get(format: str) -> Target:
    discover()
    cls = REGISTRY.get(format)
    if cls is None:
        raise UsageError(f"no target for format {format!r}",
                         fix=f"known formats: {', '.join(sorted(REGISTRY))}")
    return cls()


def validate_options(target: Target, spec: Any, where: str) -> BaseModel:
    """Validate a profile target's ``options`` against the format's own Options model."""
    from pydantic import ValidationError

    if spec.precision.value not in target.precisions:
        raise ProfileError(
            f"{target.format} does not support precision {spec.precision.value}",
            where=where, fix=f"use one of {', '.join(target.precisions)}",
        )
    try:
        return target.Options.model_validate(spec.options)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        known = ", ".join(target.Options.model_fields) or "(none)"
        raise ProfileError(
            f"{target.format} option {key}: {err['msg']} (got {err.get('input')!r})",
            where=where, fix=f"options for {target.format}: {known}",
        ) from None
