"""The zoo data sets' cache: the same arrays as a fresh generation, a corrupt file is
generated again (not a crash, not trusted), and the key follows the arguments."""

from __future__ import annotations

import numpy as np
import pytest

SMALL = {"n_train": 12, "n_calib": 6, "n_val": 8}


@pytest.fixture()
def cache(zoo_data, tmp_path, monkeypatch):
    monkeypatch.setenv(zoo_data.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _assert_same(a, b):
    assert set(a) == set(b) == {"train", "calib", "val"}
    for k in a:
        for got, want in zip(a[k], b[k], strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got, want)


@pytest.mark.parametrize("kind", ["digits", "shapes", "keyword_features"])
def test_cache_returns_the_arrays_a_fresh_generation_gives(zoo_data, cache, kind):
    make = getattr(zoo_data, kind)
    kw = dict(SMALL, seed=0) if kind == "keyword_features" else dict(SMALL, size=32, seed=0)
    fresh = make(**kw)
    first = zoo_data.cached(make, **kw)  # generated and stored
    files = list(cache.glob(f"{kind}-*.npz"))
    assert len(files) == 1
    second = zoo_data.cached(make, **kw)  # read back
    _assert_same(first, fresh)
    _assert_same(second, fresh)


def test_cached_read_does_not_generate_again(zoo_data, cache):
    calls = []

    def counting(**kw):
        calls.append(kw)
        return zoo_data.digits(**kw)

    counting.__name__ = "digits"
    zoo_data.cached(counting, size=32, seed=0, **SMALL)
    zoo_data.cached(counting, size=32, seed=0, **SMALL)
    assert len(calls) == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_corrupt_cache_file_is_generated_again(zoo_data, cache, damage):
    kw = dict(SMALL, size=32, seed=0)
    fresh = zoo_data.digits(**kw)
    zoo_data.cached(zoo_data.digits, **kw)
    (path,) = cache.glob("digits-*.npz")
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[:len(blob) // 2]
    elif damage == "flip":  # inside the first array's data: only the CRC can tell
        blob[len(blob) // 3] ^= 0xFF
    elif damage == "empty":
        blob = bytearray()
    else:
        blob = bytearray(b"not a zip file at all" * 10)
    path.write_bytes(bytes(blob))
    _assert_same(zoo_data.cached(zoo_data.digits, **kw), fresh)
    _assert_same(zoo_data._read_cached(path), fresh)  # replaced by a whole file


def test_other_arguments_get_their_own_entry(zoo_data, cache):
    zoo_data.cached(zoo_data.digits, size=32, seed=0, **SMALL)
    other = zoo_data.cached(zoo_data.digits, size=32, seed=1, **SMALL)
    assert len(list(cache.glob("digits-*.npz"))) == 2
    _assert_same(other, zoo_data.digits(size=32, seed=1, **SMALL))


def test_data_callable_uses_the_cache_and_off_turns_it_off(zoo_data, cache, monkeypatch):
    monkeypatch.setenv(zoo_data.SAMPLES_ENV, "12,6,8")
    a = zoo_data.digits32()
    assert len(list(cache.glob("digits-*.npz"))) == 1
    _assert_same(a, zoo_data.digits(size=32, seed=0, **SMALL))
    monkeypatch.setenv(zoo_data.CACHE_ENV, "off")
    assert zoo_data.cache_dir() is None
    _assert_same(zoo_data.digits32(), a)


def test_unwritable_cache_still_returns_the_arrays(zoo_data, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv(zoo_data.CACHE_ENV, str(blocker / "cache"))
    kw = dict(SMALL, size=32, seed=0)
    _assert_same(zoo_data.cached(zoo_data.digits, **kw), zoo_data.digits(**kw))
    assert not list(tmp_path.glob("**/*.tmp"))
