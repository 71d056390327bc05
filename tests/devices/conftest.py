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

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"


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
        pytest.skip("OpenSSH server missing: apt-get install -y openssh-server (make setup)")
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


# -- a demo build folder (the contract of /tmp/buildlayout.md), made once per session --------
FIXTURE_C = Path(__file__).parent / "fixture_c"
BENCH_SAMPLES = 16


def _trained_digits(splits):
    import torch

    from edgesmith.errors import ModelLoadError
    from edgesmith.pipeline.refs import import_callable

    repo = Path(__file__).resolve().parents[2]
    model = import_callable(f"{repo}/examples/digits/model.py:build", ModelLoadError)()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    x = torch.from_numpy(splits.train_x)
    y = torch.from_numpy(splits.train_y).long()
    g = torch.Generator().manual_seed(0)
    for _epoch in range(4):
        for idx in torch.randperm(len(x), generator=g).split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    return model.eval()


def _fold(conv, bn):
    import torch

    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    w = conv.weight * scale.reshape(-1, 1, 1, 1)
    b = bn.bias - bn.running_mean * scale
    return w.detach().numpy().ravel(), b.detach().numpy().ravel()


def _c_target(model, out: Path) -> None:
    """Hand-written digits CNN in C (stand-in for the generated C target), real weights."""
    import numpy as np

    out.mkdir(parents=True)
    parts = []
    for seq in (model.stem, model.block1, model.dw, model.pw, model.down, model.block2):
        parts += _fold(seq[0], seq[1])
    parts += [model.classifier.weight.detach().numpy().ravel(),
              model.classifier.bias.detach().numpy().ravel()]
    np.concatenate(parts).astype("<f4").tofile(out / "weights.bin")
    for name in ("bench_main.c", "Makefile"):
        shutil.copyfile(FIXTURE_C / name, out / name)


def _tflite_target(onnx_path: Path, splits, out: Path, work: Path) -> dict:
    from edgesmith.compress.calibration import from_splits
    from edgesmith.convert.tflite import TFLiteTarget  # noqa: F401  (registers)
    from edgesmith.pipeline import registry
    from edgesmith.profiles.schema import Calibration, TargetSpec

    target = registry.get("tflite")
    spec = TargetSpec(format="tflite", precision="fp32")
    ctx = registry.ConvertContext(
        fp32_onnx=onnx_path, spec=splits.spec,
        calib=from_splits(splits, Calibration(samples=32)), target=spec,
        options=target.Options(), profile=None, out_dir=out, work_dir=work,
        log_path=work / "tflite.log",
    )
    artifact = target.convert(ctx)
    return target.device_bench_spec(artifact)


def make_demo_build(root: Path, formats=("onnx", "tflite", "c")) -> Path:
    """Digits CNN -> build folder with onnx-fp32, tflite-fp32 and c-fp32 targets."""
    import numpy as np
    import torch

    from edgesmith.pipeline.artifact import sha256_path, size_path, write_json_atomic
    from edgesmith.pipeline.data import digits
    from edgesmith.profiles import load as load_profile

    splits = digits(seed=0)
    model = _trained_digits(splits)
    root.mkdir(parents=True, exist_ok=True)
    onnx_path = root / "model.onnx"
    torch.onnx.export(model, torch.from_numpy(splits.val_x[:1]), str(onnx_path),
                      input_names=["input"], output_names=["logits"], opset_version=17,
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      dynamo=False)
    x = splits.val_x[:BENCH_SAMPLES].astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy().astype(np.float32)
    (root / "data").mkdir()
    np.save(root / "data" / "bench_input.npy", x)
    np.save(root / "data" / "bench_reference.npy", ref)
    targets = []
    for fmt in formats:
        name = f"{fmt}-fp32"
        out = root / "targets" / name
        if fmt == "onnx":
            out.mkdir(parents=True)
            shutil.copyfile(onnx_path, out / "model.onnx")
            path, bench = out / "model.onnx", {"format": "onnx", "precision": "fp32",
                                               "files": ["model.onnx"], "runtime": "onnxruntime"}
        elif fmt == "tflite":
            bench = _tflite_target(onnx_path, splits, out, root.parent / f"{root.name}-work")
            path = out / "model.tflite"
        else:
            _c_target(model, out)
            path, bench = out, {"format": "c", "precision": "fp32",
                                "files": ["bench_main.c", "Makefile", "weights.bin"],
                                "runtime": "cc + make", "weights": "weights.bin"}
        targets.append({"name": name, "format": fmt, "precision": "fp32",
                        "path": path.relative_to(root).as_posix(), "sha256": sha256_path(path),
                        "size_bytes": size_path(path), "status": "ok", "bench": bench})
    profile = load_profile("host").model_dump(mode="json")
    write_json_atomic(root / "manifest.json", {
        "edgesmith_version": "0.1.0",
        "profile": profile,
        "input": splits.spec.to_json(),
        "bench_data": {"input": "data/bench_input.npy", "reference": "data/bench_reference.npy"},
        "targets": targets,
    })
    return root


@pytest.fixture(scope="session")
def demo_build_template(tmp_path_factory) -> Path:
    return make_demo_build(tmp_path_factory.mktemp("demo") / "build")


@pytest.fixture
def demo_build(demo_build_template: Path, tmp_path: Path) -> Path:
    """A private copy: benches write bench/ and manifest.json into it."""
    return Path(shutil.copytree(demo_build_template, tmp_path / "build"))
