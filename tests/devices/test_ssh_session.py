"""The SSH layer against a real OpenSSH server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

import pytest

from edgesmith.devices import ssh as es_ssh
from edgesmith.errors import DeviceError


def run(coro):
    return asyncio.run(coro)


def test_runs_a_quoted_command_and_round_trips_files(sshd, tmp_path):
    payload = tmp_path / "blob.bin"
    payload.write_bytes(bytes(range(256)) * 1000)

    async def go():
        async with await es_ssh.connect(sshd.ssh()) as s:
            r = await s.run(["printf", "%s|", "a b", "$(id)", "it's"])
            wd = await s.make_run_dir()
            await s.upload(payload, f"{wd}/sub/blob.bin")
            back = await s.download(f"{wd}/sub/blob.bin", tmp_path / "back.bin",
                                    sha256=hashlib.sha256(payload.read_bytes()).hexdigest())
            await s.remove_tree(wd)
            gone = await s.run(["test", "-e", wd])
            return r, wd, back, gone

    r, wd, back, gone = run(go())
    assert r.exit_status == 0 and r.stdout == "a b|$(id)|it's|"
    assert Path(wd).name.startswith("run-")
    assert back.read_bytes() == payload.read_bytes()
    assert gone.exit_status != 0


def test_unknown_host_key_is_refused_with_its_fingerprint(sshd, tmp_path):
    empty = tmp_path / "empty_known_hosts"
    with pytest.raises(DeviceError) as e:
        run(es_ssh.connect(sshd.ssh(known_hosts=str(empty))))
    assert "unknown host key SHA256:" in e.value.what
    assert "ssh-keyscan" in e.value.fix and "accept-new" in e.value.fix
    assert not empty.exists()


def test_accept_new_records_a_first_seen_key_and_then_trusts_it(sshd, tmp_path):
    known = tmp_path / "kh" / "known_hosts"

    async def go():
        async with await es_ssh.connect(sshd.ssh(known_hosts=str(known), host_key="accept-new")):
            pass
        async with await es_ssh.connect(sshd.ssh(known_hosts=str(known))) as s:
            return (await s.run(["true"])).exit_status

    assert run(go()) == 0
    assert sshd.host_key_pub in known.read_text()
    assert f"[127.0.0.1]:{sshd.port} " in known.read_text()


def test_changed_host_key_is_refused_even_with_accept_new(sshd_factory, tmp_path):
    a, b = sshd_factory(), sshd_factory()
    # b's address, a's key: what a reinstalled (or impersonated) device looks like
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{b.port} {a.host_key_pub}\n")
    with pytest.raises(DeviceError) as e:
        run(es_ssh.connect(b.ssh(known_hosts=str(known), host_key="accept-new")))
    assert "CHANGED" in e.value.what and "ssh-keygen -R" in e.value.fix
    assert known.read_text().count("\n") == 1


def test_wrong_key_is_refused_without_retrying(sshd, tmp_path):
    other = tmp_path / "other_key"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)],
                   check=True)
    with pytest.raises(DeviceError) as e:
        run(es_ssh.connect(sshd.ssh(identity=str(other)), backoff_s=30))  # no retry: fast
    assert "authentication failed" in e.value.what
    assert e.value.exit_code == 5


def test_a_down_device_is_retried_then_reported(tmp_path):
    import socket

    from edgesmith.profiles.schema import Ssh
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ssh = Ssh(host="127.0.0.1", port=port, known_hosts=str(tmp_path / "kh"))
    with pytest.raises(DeviceError) as e:
        run(es_ssh.connect(ssh, attempts=3, backoff_s=0.01))
    assert "after 3 attempts" in e.value.what


def test_command_timeout_is_a_device_error(sshd):
    async def go():
        async with await es_ssh.connect(sshd.ssh()) as s:
            await s.run(["sleep", "30"], timeout=0.5)

    with pytest.raises(DeviceError) as e:
        run(go())
    assert "timed out after 0.5 s" in e.value.what


def test_ssh_config_alias_supplies_port_user_and_identity(sshd, tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host pi-alias\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.identity}\n"
    )
    from edgesmith.profiles.schema import Ssh

    known = tmp_path / "known_hosts"
    # asyncssh checks known_hosts against the HostName the alias resolves to
    known.write_text(sshd.known_hosts_line + "\n")
    ssh = Ssh(host="pi-alias", known_hosts=str(known))

    async def go():
        async with await es_ssh.connect(ssh, config=[str(config)]) as s:
            return (await s.run(["echo", "ok"])).stdout

    assert run(go()) == "ok\n"
