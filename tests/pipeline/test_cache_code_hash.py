"""A cached conversion is keyed by the source of the target's whole room, so editing a
kernel, a lowering pass or a converter's helper module invalidates it. The key used to
hash only the file defining the target class: a cached C target kept its old kernels
and harness after runtime/*.c changed."""

from __future__ import annotations

from pathlib import Path

from edgesmith.pipeline import cache, registry


def test_tree_hash_changes_when_a_c_file_below_the_room_changes(tmp_path):
    room = tmp_path / "room"
    (room / "runtime" / "kernels").mkdir(parents=True)
    (room / "target.py").write_text("class T: ...\n")
    kernel = room / "runtime" / "kernels" / "conv.c"
    kernel.write_text("int f(void) { return 1; }\n")
    before = cache._tree_hash(room)
    kernel.write_text("int f(void) { return 2; }\n")
    cache._tree_hash.cache_clear()
    assert cache._tree_hash(room) != before
    (room / "notes.txt").write_text("not source")  # what does not build the target: ignored
    cache._tree_hash.cache_clear()
    kernel.write_text("int f(void) { return 1; }\n")
    assert cache._tree_hash(room) == before


def test_the_c_targets_key_covers_its_runtime_sources():
    c = registry.get("c")
    folder = Path(cache.inspect.getfile(type(c))).resolve().parent
    assert (folder / "runtime" / "es_runtime.c").is_file()
    assert cache.code_hash(c) == cache._tree_hash(folder)
