"""Which devices to bench: ``--local``, ``--host``, ``--device PROFILE`` or ``--fleet FILE``.

A fleet file lists devices; each entry names a profile (whose ``ssh:`` block says how to
reach it, and whose budgets and cores apply), gives an ``ssh:`` block of its own, or both
(the entry's ssh keys override the profile's)::

    concurrency: 4                      # devices benched at once (default 4)
    devices:
      - raspberry-pi-4                  # a bundled profile name or a path, as a plain string
      - profile: ./jetson.yaml          # paths are relative to this file
        name: jetson-lab-2              # key in bench/ and the manifest (default: profile name)
        ssh: {host: jetson-2.local}     # overrides the profile's ssh: block
      - name: ci-box                    # no profile: the build's profile gives budgets
        ssh: {host: 10.0.0.7, user: ci, port: 2222, host_key: accept-new}

A top-level list (without ``concurrency``/``devices``) is accepted too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from edgesmith.errors import ProfileError, UsageError
from edgesmith.profiles import load as load_profile
from edgesmith.profiles import resolve_path
from edgesmith.profiles.loader import read_yaml
from edgesmith.profiles.schema import Profile, Ssh

from .device import Device

DEFAULT_CONCURRENCY = 4


class FleetEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    profile: str | None = None
    ssh: dict[str, Any] | None = None


class FleetFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: int = Field(DEFAULT_CONCURRENCY, ge=1, le=256)
    devices: list[FleetEntry | str] = Field(..., min_length=1)


def _ssh(block: dict[str, Any], where: str, base: Path | None) -> Ssh:
    block = dict(block)
    if base is not None:  # relative key files are relative to the file that names them
        for key in ("identity", "known_hosts"):
            v = block.get(key)
            if isinstance(v, str) and not v.startswith(("/", "~")):
                block[key] = str((base / v).resolve())
    try:
        return Ssh.model_validate(block)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        fix = (f"ssh keys: {', '.join(Ssh.model_fields)}" if err["type"] == "extra_forbidden"
               else f"correct ssh.{key} (the README's 'Device profiles' shows an ssh: block)")
        raise ProfileError(f"ssh.{key}: {msg} (got {err.get('input')!r})", where=where,
                           fix=fix) from None


def _from_profile(ref: str, base: Path | None, where: str) -> Profile:
    path = resolve_path(ref, base)
    return load_profile(path)


def device_from_entry(entry: FleetEntry, where: str, base: Path | None) -> Device:
    profile = _from_profile(entry.profile, base, where) if entry.profile else None
    block: dict[str, Any] = {}
    if profile is not None and profile.ssh is not None:
        block = profile.ssh.model_dump(exclude_unset=True)
    block.update(entry.ssh or {})
    if not block:
        raise ProfileError(
            "this device has no ssh: block (neither in the entry nor in its profile)",
            where=where, fix="add `ssh: {host: ...}` to the entry or to the profile")
    name = entry.name or (profile.name if profile else None) or block.get("host")
    return Device(name=str(name), ssh=_ssh(block, where, base), profile=profile)


def load_fleet(path: Path) -> tuple[list[Device], int]:
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"fleet file {path} does not exist", where=str(path),
                         fix="see `edgesmith bench --help` for the fleet file format")
    doc = read_yaml(path) if path.suffix in (".yaml", ".yml") else None
    if doc is None:
        raise UsageError(f"fleet file {path} must be YAML (.yaml/.yml)", where=str(path))
    data = doc.data
    if isinstance(data, list):
        data = {"devices": data}
        where = doc.where
    else:
        def where(p: tuple) -> str:
            return doc.where(p)
    try:
        fleet = FleetFile.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = tuple(err["loc"])
        located = loc if isinstance(doc.data, dict) else loc[1:]
        raise ProfileError(
            f"{'.'.join(str(p) for p in loc)}: {err['msg']} (got {err.get('input')!r})",
            where=where(located),
            fix="a fleet entry has `profile:`, `name:` and/or `ssh:`; see the module doc",
        ) from None
    devices = []
    for i, entry in enumerate(fleet.devices):
        path_key = ("devices", i) if isinstance(doc.data, dict) else (i,)
        if isinstance(entry, str):
            entry = FleetEntry(profile=entry)
        devices.append(device_from_entry(entry, where(path_key), path.parent))
    return devices, fleet.concurrency


def resolve_devices(*, local: bool = False, device: str | None = None, host: str | None = None,
                    port: int | None = None, user: str | None = None,
                    identity: str | None = None, python: str | None = None,
                    known_hosts: str | None = None,
                    fleet: Path | None = None) -> tuple[list[Device], int]:
    """Turn the command line's device options into devices (and the fleet's concurrency)."""
    chosen = [n for n, v in (("--local", local), ("--device/--host", device or host),
                             ("--fleet", fleet)) if v]
    if len(chosen) != 1:
        raise UsageError(
            "choose exactly one of --local, --device/--host, --fleet"
            + (f" (got {', '.join(chosen)})" if chosen else ""),
            fix="e.g. `edgesmith bench build/host --local` or `--host pi.local`")
    if host is not None and "@" in host and user is None:  # ssh's own USER@HOST form
        user, host = host.rsplit("@", 1)
    overrides = {k: v for k, v in (("host", host), ("port", port), ("user", user),
                                   ("identity", identity), ("python", python),
                                   ("known_hosts", known_hosts)) if v is not None}
    if local:
        if overrides:
            raise UsageError("--local runs here; SSH options do not apply",
                             fix=f"drop {', '.join('--' + k for k in overrides)}")
        return [Device(name="local")], 1
    if fleet is not None:
        if overrides:
            raise UsageError("--fleet takes its devices from the file; SSH options do not apply")
        return load_fleet(fleet)
    profile = load_profile(resolve_path(device)) if device else None
    block: dict[str, Any] = {}
    if profile is not None and profile.ssh is not None:
        block = profile.ssh.model_dump(exclude_unset=True)
    elif profile is not None and host is None:
        raise UsageError(f"profile {profile.name} has no ssh: block",
                         fix="add `ssh: {host: ...}` to the profile, or pass --host")
    block.update(overrides)
    name = profile.name if profile else (host if port in (None, 22) else f"{host}-{port}")
    return [Device(name=str(name), ssh=_ssh(block, "command line", None), profile=profile)], 1
