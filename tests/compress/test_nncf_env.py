"""NNCF's extension build: a long load timeout, and stale torch build locks cleared."""

from __future__ import annotations

import os
import time

from edgesmith.compress import nncf_env


def test_old_lock_with_no_build_running_is_cleared(tmp_path, monkeypatch):
    monkeypatch.delenv(nncf_env.TIMEOUT_ENV, raising=False)
    lock = tmp_path / "quantized_functions_cpu" / "2.13.0+cpu" / "lock"
    lock.parent.mkdir(parents=True)
    lock.touch()
    old = time.time() - 3600
    os.utime(lock, (old, old))
    info = nncf_env.prepare(root=tmp_path)
    assert not lock.exists() and info["cleared_locks"] == [str(lock)]
    assert os.environ[nncf_env.TIMEOUT_ENV] == str(nncf_env.DEFAULT_TIMEOUT_S)


def test_fresh_lock_is_left_to_the_build_holding_it(tmp_path):
    lock = tmp_path / "ext" / "lock"
    lock.parent.mkdir()
    lock.touch()
    assert nncf_env.prepare(root=tmp_path)["cleared_locks"] == []
    assert lock.exists()


def test_lock_of_a_running_build_is_kept(tmp_path, monkeypatch):
    lock = tmp_path / "ext" / "lock"
    lock.parent.mkdir()
    lock.touch()
    monkeypatch.chdir(lock.parent)  # this process now "builds" there, as ninja would
    assert nncf_env.stale_locks(tmp_path, now=time.time() + 3600) == []


def test_users_own_timeout_wins(tmp_path, monkeypatch):
    monkeypatch.setenv(nncf_env.TIMEOUT_ENV, "42")
    assert nncf_env.prepare(root=tmp_path)["timeout_s"] == "42"
