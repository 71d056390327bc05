"""Load profile YAML into a validated :class:`Profile`, reporting errors as ``FILE:LINE``.

We compose the YAML node graph ourselves (``yaml.compose`` with the safe loader) instead
of calling ``safe_load`` directly, because the node graph keeps line numbers: every
validation error can then point at the line the user has to edit. The same walk guards
against alias bombs, duplicate keys and absurd nesting before pydantic ever sees the data.
"""

from __future__ import annotations

import importlib.resources
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from edgesmith.errors import ProfileError

from .schema import Profile

MAX_NODES = 20_000  # a real profile has a few hundred; aliases can multiply far beyond that
MAX_DEPTH = 32
MAX_BYTES = 1_000_000
MAX_EXTENDS = 8

Key = tuple[Any, ...]


@dataclass
class Located:
    """A plain-data document plus where each key path came from (file, line)."""

    data: Any
    lines: dict[Key, tuple[str, int]] = field(default_factory=dict)

    def where(self, path: Key) -> str:
        """The most specific known location for ``path`` (falls back to its parents)."""
        for n in range(len(path), -1, -1):
            if path[:n] in self.lines:
                file, line = self.lines[path[:n]]
                return f"{file}:{line}"
        return next(iter(self.lines.values()), ("<profile>", 1))[0] + ":1"


def bundled_dir() -> Path:
    return Path(str(importlib.resources.files("edgesmith.profiles") / "bundled"))


def bundled_names() -> list[str]:
    return sorted(p.stem for p in bundled_dir().glob("*.yaml"))


def resolve_path(ref: str | Path, base: Path | None = None) -> Path:
    """A profile reference is a bundled name (``host``) or a path to a YAML file."""
    ref_s = str(ref)
    p = Path(ref_s)
    if base is not None and not p.is_absolute():
        candidate = base / p
        if candidate.exists():
            return candidate
    if p.suffix in (".yaml", ".yml") or p.exists() or "/" in ref_s:
        if not p.exists():
            raise ProfileError(
                f"profile file {ref_s} does not exist",
                fix=f"pass a YAML file or a bundled name ({', '.join(bundled_names())})",
            )
        if p.is_dir():
            raise ProfileError(f"{ref_s} is a directory, not a profile file")
        return p
    bundled = bundled_dir() / f"{ref_s}.yaml"
    if bundled.exists():
        return bundled
    import difflib

    close = difflib.get_close_matches(ref_s, bundled_names(), n=3)
    hint = f"did you mean {', '.join(close)}?" if close else ""
    raise ProfileError(
        f"no bundled profile named {ref_s!r} and no such file",
        fix=f"{hint} see `edgesmith profiles list`".strip(),
    )


def _scalar(node: yaml.ScalarNode, file: str) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError as e:  # e.g. a !!python/object tag: refused, at its own line
        raise ProfileError(f"bad value {node.value!r}: {getattr(e, 'problem', None) or e}",
                           where=f"{file}:{node.start_mark.line + 1}",
                           fix="write a plain value; YAML tags are not allowed") from None


def _walk(node: yaml.Node, file: str, path: Key, out: Located, budget: list[int]) -> Any:
    budget[0] += 1
    if budget[0] > MAX_NODES:
        raise ProfileError(
            f"profile expands to more than {MAX_NODES} values (alias loop or alias bomb?)",
            where=f"{file}:{node.start_mark.line + 1}",
            fix="write the profile without deeply nested YAML aliases",
        )
    if len(path) > MAX_DEPTH:
        raise ProfileError(
            f"profile nests deeper than {MAX_DEPTH} levels",
            where=f"{file}:{node.start_mark.line + 1}",
            fix="a profile is a few levels deep; check the indentation",
        )
    out.lines.setdefault(path, (file, node.start_mark.line + 1))
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ProfileError(
                    "a mapping key must be a plain word",
                    where=f"{file}:{key_node.start_mark.line + 1}",
                )
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise ProfileError(
                    "YAML merge keys (<<) are not supported in profiles",
                    where=f"{file}:{key_node.start_mark.line + 1}",
                    fix="use `extends: OTHER_PROFILE` to inherit settings",
                )
            key = _scalar(key_node, file)
            if not isinstance(key, str | int | float | bool) or key is None:
                raise ProfileError("a mapping key must be a plain word",
                                   where=f"{file}:{key_node.start_mark.line + 1}")
            if key in result:
                raise ProfileError(
                    f"key {key!r} appears twice",
                    where=f"{file}:{key_node.start_mark.line + 1}",
                    fix="remove one of the two entries",
                )
            out.lines[path + (key,)] = (file, key_node.start_mark.line + 1)
            result[key] = _walk(value_node, file, path + (key,), out, budget)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_walk(v, file, path + (i,), out, budget) for i, v in enumerate(node.value)]
    return _scalar(node, file)


_OPEN = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken,
         yaml.BlockSequenceStartToken, yaml.BlockMappingStartToken)
_CLOSE = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)


def _check_depth(text: str, file: str) -> None:
    """Refuse absurd nesting from the flat token stream, before the recursive composer
    spends seconds descending into it and unwinding a RecursionError."""
    depth = 0
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, _OPEN):
            depth += 1
            if depth > MAX_DEPTH + 2:  # + the document's own mapping levels
                raise ProfileError(
                    f"profile nests deeper than {MAX_DEPTH} levels",
                    where=f"{file}:{token.start_mark.line + 1}",
                    fix="a profile is a few levels deep; check the indentation and brackets",
                )
        elif isinstance(token, _CLOSE):
            depth -= 1


def read_yaml(path: Path) -> Located:
    """Parse one YAML file into plain data with line numbers, or raise ProfileError."""
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ProfileError(f"cannot read profile: {e.strerror}", where=file) from None
    if len(raw) > MAX_BYTES:
        raise ProfileError(f"profile is {len(raw)} bytes; the limit is {MAX_BYTES}", where=file)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProfileError(f"profile is not UTF-8 text (byte {e.start})", where=file) from None
    try:
        _check_depth(text, file)
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as e:
        # the context mark is where the broken construct starts (an unclosed '['), which is
        # the line to edit; the problem mark is only where the parser noticed
        mark = e.context_mark or e.problem_mark
        line = mark.line + 1 if mark else 1
        what = " ".join(x for x in (e.context, e.problem) if x) or "YAML syntax error"
        if e.context_mark and e.problem_mark and e.problem_mark.line != e.context_mark.line:
            what += f" (noticed at line {e.problem_mark.line + 1})"
        raise ProfileError(
            f"YAML syntax error: {what}", where=f"{file}:{line}",
            fix="check the indentation and the `key: value` form on that line",
        ) from None
    except yaml.YAMLError as e:
        raise ProfileError(f"YAML error: {e}", where=file) from None
    except RecursionError:
        raise ProfileError(f"profile nests deeper than {MAX_DEPTH} levels", where=file) from None
    if len(nodes) != 1 or nodes[0] is None:
        raise ProfileError(
            "a profile file holds exactly one YAML document" if nodes else "profile is empty",
            where=f"{file}:1", fix="see `edgesmith profiles show host` for the format",
        )
    out = Located(data=None)
    try:
        out.data = _walk(nodes[0], file, (), out, [0])
    except RecursionError:
        raise ProfileError(f"profile nests deeper than {MAX_DEPTH} levels", where=file) from None
    if not isinstance(out.data, dict):
        raise ProfileError(
            f"a profile is a mapping of keys, got {type(out.data).__name__}",
            where=f"{file}:1", fix="see `edgesmith profiles show host` for the format",
        )
    return out


def _merge(base: Located, child: Located) -> Located:
    """Child keys override base keys; mappings merge recursively, lists replace."""

    def merge(b: Any, c: Any, path: Key, lines: dict[Key, tuple[str, int]]) -> Any:
        if isinstance(b, dict) and isinstance(c, dict):
            out = dict(b)
            for k, v in c.items():
                out[k] = merge(b[k], v, path + (k,), lines) if k in b else v
            return out
        # the child's value wins, and so do its line numbers below this path
        for key in [k for k in lines if k[: len(path)] == path and len(k) > len(path)]:
            del lines[key]
        return c

    lines = dict(base.lines)
    data = merge(base.data, child.data, (), lines)
    lines.update(child.lines)
    return Located(data=data, lines=lines)


def load_located(ref: str | Path, _chain: tuple[Path, ...] = ()) -> Located:
    """Read a profile and everything it ``extends:``, merged, with line numbers."""
    path = resolve_path(ref, base=_chain[-1].parent if _chain else None).resolve()
    if path in _chain:
        cycle = " -> ".join(str(p) for p in (*_chain, path))
        raise ProfileError(f"profiles extend each other in a loop: {cycle}")
    if len(_chain) >= MAX_EXTENDS:
        raise ProfileError(f"more than {MAX_EXTENDS} levels of `extends:`", where=str(path))
    doc = read_yaml(path)
    parent = doc.data.pop("extends", None)
    doc.lines.pop(("extends",), None)
    doc.data.setdefault("name", path.stem)
    if parent is None:
        return doc
    if not isinstance(parent, str) or not parent.strip():
        raise ProfileError(
            "`extends` must name one profile", where=doc.where(("extends",)),
            fix="write `extends: host` or `extends: ./base.yaml`",
        )
    try:
        base = load_located(parent, (*_chain, path))
    except ProfileError as e:  # a parent that cannot be found: say which file asked for it
        if e.where:
            raise
        raise ProfileError(e.what, where=doc.where(("extends",)), fix=e.fix) from None
    base.data.pop("name", None)
    return _merge(base, doc)


def _explain(err: dict[str, Any]) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key; check the spelling (see `edgesmith profiles show host`)"
    if kind == "missing":
        return "required field is missing"
    if kind in ("enum", "literal_error"):
        expected = err.get("ctx", {}).get("expected", "")
        return f"got {err.get('input')!r}, expected one of {expected}"
    return f"{err['msg'].removeprefix('Value error, ')} (got {err.get('input')!r})"


def validate(doc: Located) -> Profile:
    try:
        return Profile.model_validate(doc.data)
    except ValidationError as e:
        errors = e.errors()
        first = errors[0]
        path = tuple(first["loc"])
        dotted = ".".join(str(p) for p in path) or "(top level)"
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        lines = [f"{doc.where(path)}: {dotted}: {_explain(first)}{more}"]
        for err in errors[1:5]:
            p = tuple(err["loc"])
            lines.append(f"  {doc.where(p)}: {'.'.join(str(x) for x in p)}: {_explain(err)}")
        raise ProfileError("\n".join(lines)) from None


def load(ref: str | Path) -> Profile:
    """Load, merge and validate a profile: the only entry point stages should use."""
    return validate(load_located(ref))
