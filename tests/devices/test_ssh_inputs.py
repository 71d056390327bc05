"""Issue 17 item 10: the ssh: block's local files are the user's input. A missing identity
file, a folder given as known_hosts or a malformed known_hosts line is refused before any
device is contacted, with exit 2 and the file (and line) named; a live sshd is there, so a
check that let them through would reach the connection and fail differently."""

from __future__ import annotations

import pytest

K = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def _bench(cli, sshd, build, **opts):
    args = {"--identity": sshd.identity, "--known-hosts": sshd.known_hosts, **opts}
    flat = [str(x) for kv in args.items() for x in kv]
    return cli("bench", build, "--host", "127.0.0.1", "--port", sshd.port, *flat)


def _refused(r, *words) -> None:
    assert r.code == 2, r.err
    for w in words:
        assert w in r.err, (w, r.err)
    assert "Traceback" not in r.err + r.out


def test_a_missing_identity_file_is_an_input_error(cli, sshd, demo_build, tmp_path):
    missing = tmp_path / "no_such_key"
    r = _bench(cli, sshd, demo_build, **{"--identity": missing})
    _refused(r, "ssh.identity", str(missing), "does not exist")
    assert not (demo_build / "bench").exists()


def test_a_folder_as_identity_is_an_input_error(cli, sshd, demo_build, tmp_path):
    _refused(_bench(cli, sshd, demo_build, **{"--identity": tmp_path}), "ssh.identity",
             "is a directory")


def test_a_folder_as_known_hosts_is_an_input_error(cli, sshd, demo_build, tmp_path):
    r = _bench(cli, sshd, demo_build, **{"--known-hosts": tmp_path})
    _refused(r, f"{tmp_path}: device ", "known_hosts is a directory", "--known-hosts")
    assert not (demo_build / "bench").exists()


@pytest.mark.parametrize("bad", [f"|1|abc {K}", f"@bogus host {K}", "lonely-host"])
def test_a_malformed_known_hosts_line_names_the_file_and_line(cli, sshd, demo_build,
                                                               tmp_path, bad):
    known = tmp_path / "known_hosts"
    known.write_text(f"# trusted boards\n{sshd.known_hosts_line}\n{bad}\n")
    r = _bench(cli, sshd, demo_build, **{"--known-hosts": known})
    _refused(r, f"{known}:3: device ", "known_hosts line 3 is malformed", "ssh-keygen -R")
    assert "ValueError" not in r.err


def test_the_same_checks_hold_for_a_fleet_file(cli, sshd, demo_build, tmp_path):
    fleet = tmp_path / "devices.yaml"
    fleet.write_text(f"devices:\n  - name: pi\n    ssh: {{host: 127.0.0.1, port: {sshd.port}, "
                     f"identity: {tmp_path}/gone, known_hosts: {sshd.known_hosts}}}\n")
    _refused(cli("bench", demo_build, "--fleet", fleet), "device pi", f"{tmp_path}/gone")


def test_a_good_known_hosts_with_comments_still_connects(cli, sshd, demo_build, tmp_path):
    # the line-by-line diagnosis must not refuse what asyncssh reads fine
    known = tmp_path / "known_hosts"
    known.write_text(f"# boards\n\n{sshd.known_hosts_line}\n")
    r = _bench(cli, sshd, demo_build, **{"--known-hosts": known, "--python": "/no/python"})
    assert r.code == 5 and "did not run with '/no/python'" in r.err  # it got connected


def test_host_takes_ssh_s_user_at_host_form(cli, sshd, demo_build):
    # the README's `--host pi@raspberrypi.local`: the user part is the login, not the name
    r = cli("bench", demo_build, "--host", f"{sshd.user}@127.0.0.1", "--port", sshd.port,
            "--identity", sshd.identity, "--known-hosts", sshd.known_hosts,
            "--python", "/no/python")
    assert r.code == 5 and "did not run with '/no/python'" in r.err  # logged in, then stopped
    assert (demo_build / "bench" / f"127.0.0.1-{sshd.port}.json").is_file()
