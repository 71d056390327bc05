"""The SSH layer: one verified connection to one device, on asyncssh.

What it promises:

- host, user, port and identity come from the profile's ``ssh:`` block; whatever the
  block leaves unset comes from ``~/.ssh/config`` (an alias there works as ``host``);
- the server's host key must already be in ``known_hosts`` (unknown or changed keys are
  refused with the fingerprint and the way to trust it); ``host_key: accept-new`` is the
  explicit opt-in that records a first-seen key, and still refuses a changed one;
- connection errors (refused, unreachable, timed out, dropped during the handshake) are
  retried with exponential backoff; authentication and host-key failures never are;
- every remote command line is assembled from an argv with ``shlex.quote``; directories
  are made and removed over SFTP, so no path ever reaches a shell unquoted;
- uploads and downloads are checked by size, and by sha256 when the caller knows it.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import shlex
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

# cryptography deprecates DSA (51.0.1, the registry's release in December 2026, warns) and
# asyncssh names the DSA types at import time, so every `edgesmith` run that reaches this
# module printed five CryptographyDeprecationWarning lines about asyncssh's own code:
# nothing a user can act on (edgesmith offers no DSA keys)
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", module=r"asyncssh\.")
    import asyncssh

from edgesmith.errors import DeviceError, ProfileError
from edgesmith.profiles.schema import Ssh, check_ssh_host, check_ssh_user

CONNECT_ATTEMPTS = 3
BACKOFF_S = 0.5
STOP_WAIT_S = 5.0  # after closing a command's channel: how long to wait for it to exit


@dataclass(frozen=True)
class RunResult:
    exit_status: int
    stdout: str
    stderr: str
    seconds: float


def describe(ssh: Ssh) -> str:
    user = f"{ssh.user}@" if ssh.user else ""
    return f"{user}{ssh.host}:{ssh.port}"


def known_hosts_path(ssh: Ssh) -> Path:
    return Path(ssh.known_hosts or "~/.ssh/known_hosts").expanduser()


def _known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


class _HostKeyPolicy(asyncssh.SSHClient):
    """Sees every host key that ``known_hosts`` did not already trust.

    asyncssh calls ``validate_host_public_key`` only for keys outside the trusted set, so
    this is where a first-seen key is recorded (accept-new) or remembered for the error.
    """

    def __init__(self, ssh: Ssh, known: Path):
        self.ssh = ssh
        self.known = known
        self.offered: asyncssh.SSHKey | None = None
        self.changed = False
        self.recorded = False

    def validate_host_public_key(self, host: str, addr: str, port: int,
                                 key: asyncssh.SSHKey) -> bool:
        self.offered = key
        self.changed = bool(_trusted_keys(self.known, host, addr, port))
        if self.changed or self.ssh.host_key != "accept-new":
            return False
        line = f"{_known_hosts_name(host, port)} {key.export_public_key('openssh').decode()}"
        self.known.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with self.known.open("a", encoding="utf-8") as f:
            f.write(line if line.endswith("\n") else line + "\n")
        self.recorded = True
        return True


def _trusted_keys(known: Path, host: str, addr: str, port: int) -> list:
    if not known.exists():
        return []
    try:
        return list(asyncssh.read_known_hosts(str(known)).match(host, addr, port)[0])
    except (OSError, ValueError):
        return []


def _host_key_error(ssh: Ssh, policy: _HostKeyPolicy) -> DeviceError:
    where = describe(ssh)
    known = known_hosts_path(ssh)
    fp = policy.offered.get_fingerprint("sha256") if policy.offered else "(not received)"
    scan = f"ssh-keyscan -p {ssh.port} {shlex.quote(ssh.host)} >> {shlex.quote(str(known))}"
    if policy.changed:
        return DeviceError(
            f"the host key of the device has CHANGED (now {fp}); refusing to connect, "
            "this can be a man-in-the-middle or a reinstalled device",
            where=where,
            fix=f"if the device was reinstalled, remove its old line: ssh-keygen -R "
                f"{shlex.quote(_known_hosts_name(ssh.host, ssh.port))} -f "
                f"{shlex.quote(str(known))}, then trust the new key ({scan})",
        )
    return DeviceError(
        f"unknown host key {fp}; it is not in {known}",
        where=where,
        fix=f"check the fingerprint on the device (ssh-keygen -lf /etc/ssh/ssh_host_*.pub), "
            f"then trust it: {scan}; or set `host_key: accept-new` in the profile's ssh: block",
    )


def _client_keys(ssh: Ssh) -> list[str] | None:
    """The identity file as a key list, or a ProfileError (exit 2): a missing key file is
    the user's input, not the device's fault."""
    if ssh.identity is None:
        return None
    path = Path(ssh.identity).expanduser()
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise ProfileError(f"identity file {path} {what}",
                           where="ssh.identity",
                           fix="point ssh.identity (or --identity) at a private key file, or "
                               "remove it to use ssh-agent and ~/.ssh keys")
    return [str(path)]


def _known_hosts_error(known: Path, what: str, line: int | None = None) -> ProfileError:
    return ProfileError(
        f"known_hosts {what}", where=f"{known}:{line}" if line else str(known),
        fix="point ssh.known_hosts (or --known-hosts) at a known_hosts file"
            + (f"; fix or delete line {line} (`ssh-keygen -R HOST -f {shlex.quote(str(known))}`"
               " removes a host's lines)" if line else ""))


def load_known_hosts(ssh: Ssh) -> asyncssh.SSHKnownHosts:
    """The trusted host keys; a ProfileError (exit 2) naming the file, and the line, when
    the file is a directory, unreadable or malformed."""
    known = known_hosts_path(ssh)
    if known.is_dir():
        raise _known_hosts_error(known, "is a directory, not a file")
    try:
        text = known.read_text(encoding="utf-8", errors="replace") if known.exists() else ""
    except OSError as e:
        raise _known_hosts_error(known, f"cannot be read: {e.strerror or e}") from None
    try:
        return asyncssh.import_known_hosts(text)
    except ValueError as e:
        line = _bad_line(text)
        what = f"line {line} is malformed: {e}" if line else f"is malformed: {e}"
        raise _known_hosts_error(known, what, line) from None


def _bad_line(text: str) -> int | None:
    """The 1-based number of the first line asyncssh cannot read on its own."""
    for number, line in enumerate(text.splitlines(), 1):
        try:
            asyncssh.import_known_hosts(line)
        except ValueError:
            return number
    return None


def check_local_inputs(ssh: Ssh) -> None:
    """Everything of the ``ssh:`` block this machine can check before connecting: names,
    the identity file, known_hosts. Each failure is the user's to fix (exit 2)."""
    check_names(ssh)
    _client_keys(ssh)
    load_known_hosts(ssh)


def _connect_kwargs(ssh: Ssh, policy: _HostKeyPolicy, config: Sequence[str] | None) -> dict:
    kwargs: dict = {
        "known_hosts": load_known_hosts(ssh),
        "client_factory": lambda: policy,
        "connect_timeout": ssh.connect_timeout_s,
        "login_timeout": ssh.connect_timeout_s,
    }
    if config is not None:
        kwargs["config"] = list(config)
    # unset fields fall through to ~/.ssh/config (asyncssh applies it when config=() )
    if "port" in ssh.model_fields_set:
        kwargs["port"] = ssh.port
    if ssh.user:
        kwargs["username"] = ssh.user
    keys = _client_keys(ssh)
    if keys:
        kwargs["client_keys"] = keys
    return kwargs


_RETRYABLE = (OSError, asyncio.TimeoutError, asyncssh.ConnectionLost)


def check_names(ssh: Ssh) -> None:
    """Refuse a host or user that is not a plain name before anything uses it. The schema
    refuses them already; this holds for an ``Ssh`` built without validation too."""
    for field, check, value in (("host", check_ssh_host, ssh.host),
                                ("user", check_ssh_user, ssh.user)):
        try:
            check(value)
        except ValueError as e:
            raise ProfileError(str(e), where=f"ssh.{field}") from None


async def connect(ssh: Ssh, *, attempts: int = CONNECT_ATTEMPTS, backoff_s: float = BACKOFF_S,
                  config: Sequence[str] | None = None) -> Session:
    """Open a verified connection, retrying connection errors with exponential backoff.

    ``config`` lists ssh_config files; ``None`` means asyncssh's default (``~/.ssh/config``).
    """
    check_local_inputs(ssh)
    where = describe(ssh)
    last: BaseException | None = None
    for attempt in range(attempts):
        policy = _HostKeyPolicy(ssh, known_hosts_path(ssh))
        try:
            conn = await asyncssh.connect(ssh.host, **_connect_kwargs(ssh, policy, config))
            return Session(conn, ssh)
        except asyncssh.HostKeyNotVerifiable:
            raise _host_key_error(ssh, policy) from None
        except asyncssh.PermissionDenied:
            raise DeviceError(
                "authentication failed: the device accepted none of our keys", where=where,
                fix="check ssh.identity (or `ssh-add -l` for the agent) and that its public "
                    "key is in the device's ~/.ssh/authorized_keys; test with "
                    f"`ssh -p {ssh.port} {shlex.quote(where.rsplit(':', 1)[0])} true`",
            ) from None
        except (asyncssh.KeyImportError, asyncssh.KeyEncryptionError) as e:
            raise DeviceError(
                f"cannot use the identity file {ssh.identity}: {e}", where=where,
                fix="load an encrypted key into ssh-agent (`ssh-add KEY`) and drop "
                    "ssh.identity from the profile",
            ) from None
        except asyncssh.DisconnectError as e:
            if isinstance(e, asyncssh.ConnectionLost):
                last = e
            else:
                raise DeviceError(f"the device closed the connection: {e.reason}",
                                  where=where) from None
        except _RETRYABLE as e:
            last = e
        if attempt + 1 < attempts:
            await asyncio.sleep(backoff_s * (2**attempt))
    reason = str(last) or type(last).__name__
    if isinstance(last, asyncio.TimeoutError):
        reason = f"timed out after {ssh.connect_timeout_s:g} s"
    raise DeviceError(
        f"cannot connect after {attempts} attempts: {reason}", where=where,
        fix="check that the device is on, reachable and runs sshd on that port "
            "(ssh.host / ssh.port / ~/.ssh/config); raise ssh.connect_timeout_s for slow links",
    )


def quote_argv(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(str(a)) for a in argv)


class Session:
    """One open connection. Use ``async with`` or call ``close()``."""

    def __init__(self, conn: asyncssh.SSHClientConnection, ssh: Ssh):
        self.conn = conn
        self.ssh = ssh
        self.where = describe(ssh)
        self._sftp: asyncssh.SFTPClient | None = None

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._sftp is not None:
            self._sftp.exit()
            self._sftp = None
        self.conn.close()
        try:
            await asyncio.wait_for(self.conn.wait_closed(), 5)
        except (asyncio.TimeoutError, OSError):
            pass

    def _lost(self, e: BaseException, doing: str) -> DeviceError:
        return DeviceError(
            f"connection lost while {doing}: {e}", where=self.where,
            fix="check the device (power, network, sshd); results measured so far were kept",
        )

    async def sftp(self) -> asyncssh.SFTPClient:
        if self._sftp is None:
            try:
                self._sftp = await self.conn.start_sftp_client()
            except (asyncssh.Error, OSError) as e:
                raise DeviceError(
                    f"cannot start SFTP: {e}", where=self.where,
                    fix="enable the sftp subsystem in the device's sshd_config "
                        "(`Subsystem sftp internal-sftp`)",
                ) from None
        return self._sftp

    async def run(self, argv: Sequence[str], *, cwd: str | None = None,
                  timeout: float | None = None) -> RunResult:
        """Run ``argv`` (each word quoted) optionally in ``cwd``; never raises on exit status.

        When we stop waiting (timeout, or the caller is cancelled: Ctrl-C), the channel is
        closed and we wait (at most STOP_WAIT_S) until sshd confirms, which it does once
        the command has exited. Closing the channel closes the command's stdin, which the
        bench script watches (``--stop-on-eof``); a SIGTERM is sent too, for commands that
        do not watch, but sshd delivers no signal to root sessions."""
        command = quote_argv(argv)
        if cwd is not None:
            command = f"cd {shlex.quote(cwd)} && {command}"
        limit = timeout if timeout is not None else self.ssh.command_timeout_s
        t0 = time.perf_counter()
        process = None
        try:
            process = await self.conn.create_process(command)
            r = await process.wait(check=False, timeout=limit)
        except asyncssh.TimeoutError:
            await _stop(process)
            raise DeviceError(
                f"command timed out after {limit:g} s: {command}", where=self.where,
                fix="raise ssh.command_timeout_s in the profile, or lower --runs",
            ) from None
        except asyncio.CancelledError:
            await _stop(process)
            raise
        except (asyncssh.Error, OSError) as e:
            raise self._lost(e, f"running {argv[0]}") from None
        status = r.exit_status if r.exit_status is not None else -1
        if r.exit_signal:
            status = -1
        return RunResult(status, _text(r.stdout), _text(r.stderr), time.perf_counter() - t0)

    def run_dir_path(self, base: str | None = None) -> str:
        """A fresh ``<workdir>/run-<time>-<random>`` path (not created yet)."""
        base = _sftp_path(base or self.ssh.workdir)
        return str(PurePosixPath(base) / f"run-{time.strftime('%Y%m%d-%H%M%S')}-"
                                         f"{secrets.token_hex(3)}")

    async def make_run_dir(self, base: str | None = None, path: str | None = None) -> str:
        """Create ``path`` (default: a fresh ``run_dir_path``) with mode 700; return it
        absolute."""
        path = path or self.run_dir_path(base)
        sftp = await self.sftp()
        try:
            await sftp.makedirs(path, exist_ok=True)
            await sftp.chmod(path, 0o700)
            return await sftp.realpath(path)
        except (asyncssh.SFTPError, OSError) as e:
            raise DeviceError(
                f"cannot create the work dir {path}: {e}", where=self.where,
                fix="set ssh.workdir to a writable folder on the device",
            ) from None

    async def remove_tree(self, path: str) -> None:
        sftp = await self.sftp()
        try:
            await sftp.rmtree(path, ignore_errors=True)
        except (asyncssh.Error, OSError) as e:
            raise self._lost(e, f"removing {path}") from None

    async def upload(self, local: Path, remote: str) -> int:
        """Copy a file (or a folder, recursively) and check every file's size. Returns bytes."""
        local = Path(local)
        sftp = await self.sftp()
        files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
        total = 0
        try:
            for f in files:
                rel = f.relative_to(local).as_posix() if f != local else ""
                dst = str(PurePosixPath(remote) / rel) if rel else remote
                await sftp.makedirs(str(PurePosixPath(dst).parent), exist_ok=True)
                await sftp.put(str(f), dst)
                size = f.stat().st_size
                got = (await sftp.stat(dst)).size
                if got != size:
                    raise DeviceError(f"upload of {f} is truncated ({got} of {size} bytes)",
                                      where=f"{self.where}:{dst}",
                                      fix="check free space in ssh.workdir on the device")
                total += size
        except (asyncssh.SFTPError, OSError) as e:
            raise DeviceError(f"upload of {local} failed: {e}", where=f"{self.where}:{remote}",
                              fix="check free space and permissions of ssh.workdir") from None
        except asyncssh.Error as e:
            raise self._lost(e, f"uploading {local.name}") from None
        return total

    async def download(self, remote: str, local: Path, *, sha256: str | None = None) -> Path:
        """Fetch one file; its size must match the remote stat, its hash ``sha256`` if given."""
        sftp = await self.sftp()
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        try:
            size = (await sftp.stat(remote)).size
            await sftp.get(remote, str(local))
        except (asyncssh.SFTPError, OSError) as e:
            raise DeviceError(f"download of {remote} failed: {e}",
                              where=self.where) from None
        except asyncssh.Error as e:
            raise self._lost(e, f"downloading {remote}") from None
        if local.stat().st_size != size:
            raise DeviceError(f"download of {remote} is truncated", where=self.where)
        if sha256 is not None and _sha256(local) != sha256:
            local.unlink(missing_ok=True)
            raise DeviceError(f"download of {remote} does not match its sha256",
                              where=self.where, fix="retry; check the device's storage")
        return local


async def _stop(process: asyncssh.SSHClientProcess | None) -> None:
    """Best effort: stop a remote command we no longer wait for and drop its channel.

    sshd confirms the channel's close only after the command has exited, so waiting for
    that confirmation keeps a following clean-up (removing the work dir) from racing the
    command's last writes."""
    if process is None:
        return
    try:
        process.send_signal("TERM")
    except (asyncssh.Error, OSError, ValueError):
        pass
    process.close()
    try:
        await asyncio.wait_for(process.wait_closed(), STOP_WAIT_S)
    except (asyncio.TimeoutError, asyncssh.Error, OSError):
        pass


def _sftp_path(path: str) -> str:
    """SFTP paths are relative to the login folder; ``~/x`` means exactly that."""
    if path == "~":
        return "."
    return path[2:] if path.startswith("~/") else path


def _text(data: object) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


__all__ = ["RunResult", "Session", "check_local_inputs", "connect", "describe",
           "known_hosts_path", "load_known_hosts", "quote_argv"]
