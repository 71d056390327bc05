"""A real OpenSSH server for the device tests, on 127.0.0.1 only, with throw-away keys.

``sshd`` gives one server; ``sshd_factory`` starts as many as a test asks for (fleets).
Each server has its own host key, its own authorized user key and its own config, and is
killed together with every session it forked (one process group) when the test ends.
"""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import require_tools

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"


def wait_for(predicate, timeout: float, what: str):
    """Poll ``predicate`` until it returns something true (returned), or fail naming
    ``what``: remote processes start and stop on their own time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, capture_output=True,
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SshdServer:
    """One running sshd and everything a client needs to reach it."""

    host: str
    port: int
    user: str
    identity: Path  # authorized private key
    known_hosts: Path  # a file holding exactly this server's host key line
    known_hosts_line: str
    host_key_pub: str
    root: Path
    proc: subprocess.Popen | None = field(default=None, repr=False)

    def ssh(self, **overrides):
        """An ``ssh:`` profile block for this server (python = this interpreter)."""
        from edgesmith.profiles.schema import Ssh

        fields = {
            "host": self.host, "port": self.port, "user": self.user,
            "identity": str(self.identity), "known_hosts": str(self.known_hosts),
            "workdir": str(self.root / "remote"), "python": sys.executable,
            "connect_timeout_s": 5.0, "command_timeout_s": 120.0,
        }
        fields.update(overrides)
        return Ssh(**fields)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Kill the server and every session it forked (like pulling the device's plug).

        sshd puts each connection in a session of its own (setsid), so the process group
        is not enough: walk /proc for the listener's descendants first."""
        if self.proc is None:
            return
        victims = [self.proc.pid, *_descendants(self.proc.pid)]
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _start(root: Path, log: Path) -> SshdServer:
    root.mkdir(parents=True, exist_ok=True)
    host_key = root / "host_ed25519"
    user_key = root / "user_ed25519"
    _keygen(host_key, "edgesmith-test-host")
    _keygen(user_key, "edgesmith-test-user")
    authorized = root / "authorized_keys"
    authorized.write_text((root / "user_ed25519.pub").read_text())
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # privilege-separation dir
    user = getpass.getuser()
    host_pub = (root / "host_ed25519.pub").read_text().split()
    for _attempt in range(5):
        port = _free_port()
        config = root / "sshd_config"
        config.write_text(
            "\n".join([
                "ListenAddress 127.0.0.1",
                f"Port {port}",
                f"HostKey {host_key}",
                f"AuthorizedKeysFile {authorized}",
                f"PidFile {root / 'sshd.pid'}",
                "UsePAM no",
                "StrictModes no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                f"AllowUsers {user}",
                "Subsystem sftp internal-sftp",
                "PrintMotd no",
                "MaxStartups 64",
                "LogLevel ERROR",
                "",
            ])
        )
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)],
            stdout=subprocess.DEVNULL, stderr=log.open("ab"), start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    if s.recv(64).startswith(b"SSH-2.0"):
                        break
            except OSError:
                time.sleep(0.02)
        else:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            continue  # port taken between probe and bind, or a slow start: try another
        line = f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}"
        known = root / "known_hosts"
        known.write_text(line + "\n")
        return SshdServer(
            host="127.0.0.1", port=port, user=user, identity=user_key, known_hosts=known,
            known_hosts_line=line, host_key_pub=f"{host_pub[0]} {host_pub[1]}", root=root,
            proc=proc,
        )
    raise RuntimeError(f"sshd did not start; see {log}")


@pytest.fixture
def sshd_factory(tmp_path: Path) -> Iterator[Callable[[], SshdServer]]:
    """Start any number of loopback sshd servers; all are killed after the test."""
    if not Path(SSHD).exists():
        require_tools("sshd")
    servers: list[SshdServer] = []

    def start() -> SshdServer:
        server = _start(tmp_path / f"sshd{len(servers)}", tmp_path / "sshd.log")
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.kill()


@pytest.fixture
def sshd(sshd_factory: Callable[[], SshdServer]) -> SshdServer:
    return sshd_factory()


# -- a demo build folder, made once per session by the real pipeline --------------------------
ROOT = Path(__file__).resolve().parents[2]
DEMO_TARGETS = ("onnx:fp32", "tflite:fp32", "c:fp32")


def train_digits_ckpt(path: Path) -> Path:
    """The demo CNN trained briefly (as the root conftest's ``digits_ckpt``), for scripts."""
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "digits"))
    try:
        from train import train
    finally:
        sys.path.pop(0)
    model, _acc = train(epochs=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    return path


def make_demo_build(out: Path, ckpt: Path, targets=DEMO_TARGETS) -> Path:
    """``edgesmith build`` of the digits demo for the host profile: the generated targets,
    bench tensors and manifest exactly as a user's build folder has them."""
    from edgesmith.pipeline import build

    build.run(build.BuildRequest(
        model=str(ckpt), arch=f"{ROOT}/examples/digits/model.py:build", data="digits",
        profile="host", out=Path(out), targets=list(targets)))
    return Path(out)


@pytest.fixture(scope="session")
def demo_build_template(tmp_path_factory, digits_ckpt: Path) -> Path:
    return make_demo_build(tmp_path_factory.mktemp("demo") / "build", digits_ckpt)


@pytest.fixture
def demo_build(demo_build_template: Path, tmp_path: Path) -> Path:
    """A private copy: benches write bench/ and manifest.json into it."""
    return Path(shutil.copytree(demo_build_template, tmp_path / "build"))
