"""Where the bench script runs: a device over SSH, or this machine (``--local``).

Both transports give the bench the same four verbs (open, put, run, close) and the same
work-dir layout, so ``--local`` measures exactly what a device run measures minus SSH.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from edgesmith.errors import DeviceError
from edgesmith.profiles.schema import Ssh

from . import ssh as ssh_mod
from .ssh import RunResult


class Transport:
    python: str
    address: str
    workdir: str | None = None
    kind: str

    async def open(self) -> None:
        raise NotImplementedError

    async def put(self, local: Path, rel: str) -> int:
        raise NotImplementedError

    async def run(self, argv: Sequence[str], timeout: float) -> RunResult:
        raise NotImplementedError

    async def close(self, keep: bool) -> None:
        raise NotImplementedError


class SshTransport(Transport):
    kind = "ssh"

    def __init__(self, ssh: Ssh, *, connect_attempts: int = ssh_mod.CONNECT_ATTEMPTS,
                 backoff_s: float = ssh_mod.BACKOFF_S, config: Sequence[str] | None = None):
        self.ssh = ssh
        self.python = ssh.python
        self.address = ssh_mod.describe(ssh)
        self.session: ssh_mod.Session | None = None
        self._connect = dict(attempts=connect_attempts, backoff_s=backoff_s, config=config)

    async def open(self) -> None:
        self.session = await ssh_mod.connect(self.ssh, **self._connect)
        # known before it exists, so a run cancelled while it is being made still cleans up
        self.workdir = self.session.run_dir_path()
        self.workdir = await self.session.make_run_dir(path=self.workdir)

    async def put(self, local: Path, rel: str) -> int:
        assert self.session is not None and self.workdir is not None
        return await self.session.upload(local, f"{self.workdir}/{rel}")

    async def run(self, argv: Sequence[str], timeout: float) -> RunResult:
        assert self.session is not None
        return await self.session.run(argv, cwd=self.workdir, timeout=timeout)

    async def close(self, keep: bool) -> None:
        if self.session is None:
            return
        try:
            if self.workdir is not None and not keep:
                await self.session.remove_tree(self.workdir)
        finally:
            await self.session.close()
            self.session = None


class LocalTransport(Transport):
    """The same work dir and command lines, as subprocesses of this python."""

    kind = "local"

    def __init__(self, python: str | None = None):
        self.python = python or sys.executable
        self.address = "local"

    async def open(self) -> None:
        self.workdir = tempfile.mkdtemp(prefix="edgesmith-bench-")

    async def put(self, local: Path, rel: str) -> int:
        assert self.workdir is not None
        dst = Path(self.workdir) / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if Path(local).is_dir():
            shutil.copytree(local, dst, dirs_exist_ok=True)
            return sum(p.stat().st_size for p in dst.rglob("*") if p.is_file())
        shutil.copyfile(local, dst)
        return dst.stat().st_size

    async def run(self, argv: Sequence[str], timeout: float) -> RunResult:
        t0 = time.perf_counter()
        try:
            # its own process group: stopping it also stops what it started (make, the C
            # bench); stdin a pipe held open while we wait, as the SSH channel is
            # (``--stop-on-eof``), never this terminal
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=self.workdir, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                start_new_session=True)
        except OSError as e:
            raise DeviceError(f"cannot start {argv[0]}: {e}", where="local") from None
        try:
            out, err = await asyncio.wait_for(_outputs(proc), timeout)
        except asyncio.TimeoutError:
            await _kill_group(proc)
            raise DeviceError(f"command timed out after {timeout:g} s: {argv[0]}",
                              where="local", fix="lower --runs") from None
        except asyncio.CancelledError:
            await _kill_group(proc)
            raise
        return RunResult(proc.returncode if proc.returncode is not None else -1,
                         out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                         time.perf_counter() - t0)

    async def close(self, keep: bool) -> None:
        if self.workdir is not None and not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


async def _outputs(proc: asyncio.subprocess.Process) -> tuple[bytes, bytes]:
    """stdout and stderr to the end, without closing stdin first (``communicate`` would:
    the bench script takes that end of file for "stop")."""
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    out, err, _ = await asyncio.gather(proc.stdout.read(), proc.stderr.read(), proc.wait())
    proc.stdin.close()
    return out, err


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        await asyncio.wait_for(proc.wait(), 5)
    except asyncio.TimeoutError:
        pass
