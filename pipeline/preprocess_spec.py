"""The preprocessing declaration: from the profile's ``preprocess:`` block, ``--preprocess
KEY=VALUE,...`` or ``--preprocess file.yaml``; checked once here so that the three
implementations (``preprocess.py``, the device script, ``es_preprocess.c``) never see a
spec they would read differently."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from edgesmith.errors import EdgesmithError, ProfileError, UsageError
from edgesmith.profiles.loader import read_yaml
from edgesmith.profiles.schema import Preprocess, Profile

from . import preprocess

CLI_KEYS = {"resize": "resize", "crop": "center_crop", "center_crop": "center_crop",
            "mean": "mean", "std": "std", "order": "channel_order",
            "channel_order": "channel_order", "layout": "layout", "dtype": "dtype"}
EXAMPLE = ("--preprocess resize=256x256,crop=224x224,mean=123.7/116.3/103.5,"
           "std=58.4/57.1/57.4,order=rgb")


def _value(key: str, raw: str) -> Any:
    if key in ("resize", "center_crop"):
        parts = raw.lower().split("x")
        if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"{raw!r} is not HEIGHTxWIDTH (e.g. 224x224)")
        return [int(p) for p in parts]
    if key in ("mean", "std"):
        try:
            return [float(p) for p in raw.split("/")]
        except ValueError:
            raise ValueError(f"{raw!r} is not numbers separated by '/' "
                             "(e.g. 123.7/116.3/103.5)") from None
    return raw.strip().lower()


def parse_cli(text: str) -> Preprocess:
    """``--preprocess``: a YAML file (``.yaml``/``.yml``) or ``KEY=VALUE,...``."""
    if text.endswith((".yaml", ".yml")):
        return from_yaml(Path(text))
    fields: dict[str, Any] = {}
    for item in (i for i in text.split(",") if i.strip()):
        key, sep, raw = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in CLI_KEYS:
            raise UsageError(f"--preprocess: {item!r} is not KEY=VALUE with KEY one of "
                             "resize, crop, mean, std, order, layout, dtype",
                             fix=f"e.g. {EXAMPLE}, or a YAML file")
        try:
            fields[CLI_KEYS[key]] = _value(CLI_KEYS[key], raw)
        except ValueError as e:
            raise UsageError(f"--preprocess {key}: {e}", fix=f"e.g. {EXAMPLE}") from None
    return checked(fields, "--preprocess", UsageError)


def from_yaml(path: Path) -> Preprocess:
    """A YAML file holding the block's keys (at the top, or under ``preprocess:``)."""
    if not path.is_file():
        raise UsageError(f"--preprocess file {path} does not exist",
                         fix="check the path, or give KEY=VALUE pairs")
    doc = read_yaml(path)
    data = doc.data.get("preprocess", doc.data) if isinstance(doc.data, dict) else doc.data
    if not isinstance(data, dict):
        raise UsageError("expected a mapping of preprocess keys", where=f"{path}:1",
                         fix="e.g. resize: [256, 256] / center_crop: [224, 224] / ...")
    return checked(data, str(path), UsageError)


def checked(fields: dict[str, Any] | Preprocess, where: str,
            error: type[EdgesmithError]) -> Preprocess:
    """A ``Preprocess`` whose every field the three implementations read alike."""
    try:
        spec = fields if isinstance(fields, Preprocess) else Preprocess(**fields)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise error(f"preprocess {loc}: {first['msg']}", where=where,
                    fix="see README 'Image folders and preprocessing'") from None
    except TypeError as e:
        raise error(f"preprocess: {e}", where=where) from None
    for name in ("mean", "std"):
        values = getattr(spec, name)
        if values is not None and len(values) not in (1, preprocess.CHANNELS):
            raise error(f"preprocess {name} has {len(values)} values; expected 1 or "
                        f"{preprocess.CHANNELS} (one per channel, in the model's order)",
                        where=where)
    if spec.dtype != "float32" and (spec.mean or spec.std):
        raise error(f"preprocess dtype {spec.dtype} takes the pixels as they are (int8: "
                    "pixel - 128); mean/std apply to float32 only", where=where,
                    fix="drop mean/std, or use dtype float32")
    if spec.resize and spec.center_crop and (spec.center_crop[0] > spec.resize[0]
                                             or spec.center_crop[1] > spec.resize[1]):
        raise error(f"preprocess center_crop {spec.center_crop} is larger than resize "
                    f"{spec.resize}", where=where, fix="crop at most the resized size")
    return spec


def as_dict(spec: Preprocess) -> dict[str, Any]:
    """The plain dict every implementation reads (and the manifest records)."""
    return spec.model_dump(mode="json")


def manifest_entry(spec: Preprocess | None, source: str) -> dict[str, Any] | None:
    """``preprocess`` in the manifest: the spec, where it came from, and the resize rule."""
    if spec is None:
        return None
    return {**as_dict(spec), "source": source, "frame": "HWC uint8 RGB",
            "resize_rule": preprocess.RESIZE_RULE}


def for_build(cli: str | None, profile: Profile) -> tuple[Preprocess | None, Profile]:
    """The build's spec (``--preprocess`` over the profile's block, both checked) and the
    profile carrying it, so converters (the C target's model.h) and the manifest see the
    one the data were made with."""
    if cli is None:
        if profile.preprocess is None:
            return None, profile
        return checked(profile.preprocess, f"profile {profile.name}: preprocess",
                       ProfileError), profile
    spec = parse_cli(cli)
    return spec, profile.model_copy(update={"preprocess": spec})
