"""Isolated environments holding exactly the runtime release a device profile declares.

A profile's ``runtimes: {tflite: "tflite-runtime==2.14.0"}`` is a pip requirement; the
checks in ``runtime_compat.py`` (which op versions that release registers) and
``runtime_run.py`` (does the artifact run there and agree) need that release importable
without touching the project's own environment, whose ai-edge-litert / onnxruntime are
newer. So each requirement gets its own venv under
``$XDG_CACHE_HOME/edgesmith/runtimes/<key>``, keyed by the requirement, its companion pins
and the python version, created once and reused by every later build.

Creation is atomic: the venv is built in a hidden sibling folder and renamed into place
only after pip succeeded, under a file lock, so a creation killed half-way leaves nothing
a later build would take for a finished environment. pip runs under a wall-clock limit;
a package that cannot be installed is a ``RuntimeEnvError`` quoting pip's last lines.

It lives in ``convert/`` because the static compat checks need it (they probe the runtime)
and ``devices/`` already imports ``convert/``: placed there it would close a cycle.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from edgesmith.errors import EXIT_INPUT, EdgesmithError

# The runtime releases profiles name (tflite-runtime 2.14, onnxruntime 1.16) were built
# against numpy 1.x and crash on import beside numpy 2, which pip would pick for them.
COMPANIONS = ("numpy<2",)
PIP_TIMEOUT_S = float(os.environ.get("EDGESMITH_PIP_TIMEOUT", "600"))
RUN_TIMEOUT_S = 300.0
DONE = ".edgesmith-env.json"  # written last inside the folder: the env is complete
PIP_TAIL_LINES = 6


class RuntimeEnvError(EdgesmithError):
    """A declared runtime release cannot be installed or started on this host."""

    exit_code = EXIT_INPUT


@dataclass(frozen=True)
class RuntimeEnv:
    """One finished environment: its folder and the requirement it was made for."""

    requirement: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/edgesmith/runtimes`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgesmith" / "runtimes"


def python_tag() -> str:
    return f"py{sys.version_info.major}.{sys.version_info.minor}"


def env_key(requirement: str) -> str:
    """A readable, filesystem-safe folder name that changes with anything the env holds."""
    parts = json.dumps([requirement, COMPANIONS, python_tag(), sys.platform])
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", requirement).strip("-")[:48]
    return f"{slug}-{python_tag()}-{hashlib.sha256(parts.encode()).hexdigest()[:10]}"


def check_requirement(requirement: str, where: str) -> str:
    """A plain ``name==version`` (or other pip specifier) string; no options, URLs or
    paths, which pip would otherwise read as instructions."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[A-Za-z0-9,._-]+\])?"
                        r"\s*((==|>=|<=|~=|!=|<|>)\s*[A-Za-z0-9.*+!-]+\s*,?\s*)*", requirement):
        raise RuntimeEnvError(
            f"runtime requirement {requirement!r} is not a pip requirement string",
            where=where, fix="write it as NAME==VERSION, e.g. tflite-runtime==2.14.0")
    return requirement


def find(requirement: str) -> RuntimeEnv | None:
    """The finished env for ``requirement``, or None when it was never created."""
    path = cache_root() / env_key(requirement)
    if (path / DONE).is_file() and (path / "bin" / "python").exists():
        return RuntimeEnv(requirement, path)
    return None


def ensure(requirement: str, *, where: str = "profile runtimes",
           on_create=None) -> RuntimeEnv:
    """The env for ``requirement``, created (once, atomically, under a lock) if missing.
    ``on_create(message)`` is told before the minutes a new one takes."""
    check_requirement(requirement, where)
    found = find(requirement)
    if found is not None:
        return found
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    key = env_key(requirement)
    with _lock(root / f".{key}.lock"):
        found = find(requirement)  # another build made it while we waited
        if found is not None:
            return found
        if on_create is not None:
            on_create(f"runtime env: creating {root / key} ({requirement}, once)")
        final = root / key
        shutil.rmtree(final, ignore_errors=True)  # a folder without DONE is not an env
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        try:
            _create(tmp, requirement, where)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return RuntimeEnv(requirement, final)


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _create(folder: Path, requirement: str, where: str) -> None:
    """venv (without pip: the project's pip installs into it with --python) + pip."""
    _call([sys.executable, "-m", "venv", "--without-pip", "--clear", str(folder)],
          requirement, where, "python -m venv", 120.0)
    pip = [sys.executable, "-m", "pip", "--python", str(folder / "bin" / "python"),
           "install", "--no-input", "--disable-pip-version-check", "--no-cache-dir",
           "--timeout", "30", "--retries", "1", requirement, *COMPANIONS]
    _call(pip, requirement, where, "pip install", PIP_TIMEOUT_S)
    info = {"requirement": requirement, "companions": list(COMPANIONS),
            "python": python_tag(), "pip_freeze": _freeze(folder)}
    (folder / DONE).write_text(json.dumps(info, indent=1))


def _freeze(folder: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(folder / "bin/python"),
                          "freeze", "--disable-pip-version-check"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.split()


def _call(cmd: list[str], requirement: str, where: str, what: str, timeout: float) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeEnvError(
            f"{what} for {requirement!r} did not finish within {timeout:.0f} s", where=where,
            fix="check the network or the package index (pip config), or raise "
                "EDGESMITH_PIP_TIMEOUT; nothing was kept") from None
    if p.returncode != 0:
        tail = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()][-PIP_TAIL_LINES:]
        raise RuntimeEnvError(
            f"cannot create the environment for {requirement!r}: {what} exited "
            f"{p.returncode}:\n    " + "\n    ".join(tail), where=where,
            fix="declare a release pip can install for this python "
                f"({python_tag()}; `pip download --no-deps {requirement}` tells), or remove "
                "the entry from the profile's runtimes")


def run_script(env: RuntimeEnv, source: str, args: list[str], *,
               timeout: float = RUN_TIMEOUT_S, cwd: Path | None = None
               ) -> subprocess.CompletedProcess:
    """Run ``source`` with the env's python (isolated: no user site, no PYTHONPATH, so only
    the env's packages are importable); returns the finished process, never raises for a
    non-zero exit (a crash of the runtime is a finding, not an error of ours)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    env_vars = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env_vars.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONNOUSERSITE="1")
    try:
        return subprocess.run([str(env.python), "-I", f.name, *args], capture_output=True,
                              text=True, timeout=timeout, env=env_vars, cwd=cwd,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise RuntimeEnvError(f"{env.requirement}: a run in its environment took more than "
                              f"{timeout:.0f} s", where=str(env.path),
                              fix="see whether the model is unusually large; the env "
                                  "itself is kept") from None
    finally:
        os.unlink(f.name)


def describe(env: RuntimeEnv) -> dict[str, object]:
    """What the env holds (its requirement, python, pip freeze), for the manifest."""
    try:
        return json.loads((env.path / DONE).read_text())
    except (OSError, ValueError):
        return {"requirement": env.requirement}
