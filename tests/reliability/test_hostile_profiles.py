"""Hostile profile YAML: random structures, random bytes, unicode, huge numbers, deep
nesting, alias bombs. The only acceptable outcomes are a Profile or a ProfileError."""

from __future__ import annotations

import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgesmith import profiles
from edgesmith.errors import ProfileError

GOOD = """\
device:
  name: board
  arch: aarch64
  ram_mb: 512
compress:
  calibration: {samples: 64}
targets:
  - {format: onnx, precision: fp32}
budgets: {accuracy_drop: 1.0}
"""

KEYS = ["device", "name", "arch", "ram_mb", "targets", "format", "precision", "options",
        "budgets", "compress", "prune", "ratio", "ssh", "host", "port", "extends", "cores",
        "é", "💥", "", "<<"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["fp32", "int8", "onnx", "c", "aarch64", "x86_64", "nan", "1e999"]),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner,
                                            max_size=6)),
    max_leaves=40,
)

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def _load(tmp_path, text: str | bytes):
    path = tmp_path / "p.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    t0 = time.perf_counter()
    try:
        profiles.load(path)
    except ProfileError as e:
        assert e.message().startswith(str(path)) or str(path) in e.message()
    assert time.perf_counter() - t0 < 5, "profile loading must never hang"


def _refused(tmp_path, text: str) -> str:
    """Load must raise a ProfileError naming the file, fast; returns its message."""
    path = tmp_path / "p.yaml"
    path.write_text(text)
    t0 = time.perf_counter()
    with pytest.raises(ProfileError) as e:
        profiles.load(path)
    assert time.perf_counter() - t0 < 5, "profile loading must never hang"
    assert str(path) in e.value.message()
    return e.value.message()


@pytest.mark.slow
@FUZZ
@given(doc=documents)
def test_random_structures_give_a_profile_or_a_clean_error(tmp_path, doc):
    _load(tmp_path, yaml.safe_dump(doc, allow_unicode=True))


@pytest.mark.slow
@FUZZ
@given(data=st.data())
def test_mutated_good_profile_gives_a_profile_or_a_clean_error(tmp_path, data):
    raw = bytearray(GOOD.encode())
    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        i = data.draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            raw[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            raw[i:i] = data.draw(st.sampled_from(
                [b"&a ", b"*a", b"{", b"[", b"!!python/object:os.system ", b"\t", b"\x00",
                 b"- ", b": ", b"\n  ", b"<<: *a\n", b"\xff", "é".encode()]))
        else:
            del raw[i]
    _load(tmp_path, bytes(raw))


def test_python_tags_are_not_executed(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(GOOD.replace("name: board", "name: !!python/object/apply:os.system [id]"))
    try:
        profiles.load(path)
        raise AssertionError("a python tag must not load")
    except ProfileError as e:
        assert "p.yaml:2" in e.message()


def test_python_tag_on_a_scalar_is_refused_at_its_file_and_line(tmp_path):
    path = tmp_path / "p.yaml"  # a tagged plain scalar (key or value), not a tagged sequence
    path.write_text(GOOD.replace("name: board", "name: !!python/object:os.system board"))
    try:
        profiles.load(path)
        raise AssertionError("a python tag must not load")
    except ProfileError as e:
        assert "p.yaml:2" in e.message() and "<unicode string>" not in e.message()


def test_deep_nesting_is_refused(tmp_path):
    _refused(tmp_path, "device: " + "[" * 5000 + "]" * 5000 + "\n")
    _refused(tmp_path, "device:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 200)))


def test_billion_laughs_is_refused_fast(tmp_path):
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    prev = "a"
    for name in "bcdefghij":
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
        prev = name
    _refused(tmp_path, "\n".join(lines) + "\n")


def test_huge_file_is_refused(tmp_path):
    _refused(tmp_path, GOOD + "#" + "x" * 2_000_000 + "\n")
