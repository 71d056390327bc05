"""The formats a device can bench, found the way the pipeline finds them (every module of
the format rooms registers its ``Target``), and each target's options for one device.

Devices never name a format: what differs between them (the loader run on the device, the
threads option, a build done here) is what each format's ``Target`` says.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from edgesmith.profiles.schema import Profile
from edgesmith.target import Target, discover, options_error

__all__ = ["discover", "options_for", "target_for"]


def target_for(fmt: str) -> Target | None:
    cls = discover().get(fmt)
    return cls() if cls is not None else None


def _profile_options(profile: Profile | None, name: str) -> dict[str, Any]:
    for spec in profile.targets if profile is not None else []:
        if spec.name == name:
            return dict(spec.options)
    return {}


def options_for(target: Target, name: str, device: str, build_profile: Profile | None,
                device_profile: Profile | None) -> BaseModel:
    """Target ``name``'s options on ``device``, validated by its format: the build
    profile's, under the device profile's entry of the same name; a threads option neither
    sets is the device profile's (else the build's) ``cores``."""
    raw = {**_profile_options(build_profile, name),
           **_profile_options(device_profile, name)}
    cores_from = device_profile or build_profile
    threads = target.device_threads_option
    if threads and threads not in raw and cores_from is not None:
        raw[threads] = cores_from.device.cores
    try:
        return target.Options.model_validate(raw)
    except ValidationError as e:
        raise options_error(target, e, f"targets[{name}].options",
                            context=f"device {device}: target {name}: ") from None
