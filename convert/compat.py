"""The op-compat report: every node of the graph against every target of the profile.

Users lose days to a converter dying on an op deep inside a third-party tool. Asking each
target about each node *before* any conversion turns that into one table that names the
node, the op, the attributes that matter and what to do instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from edgesmith.convert._onnx_gelu import exact_gelu_erfs
from edgesmith.errors import UnsupportedOpError
from edgesmith.profiles.schema import TargetSpec
from edgesmith.target import Target

# attributes worth showing: they are what usually decides whether a target copes
_SHOWN_ATTRS = ("kernel_shape", "strides", "dilations", "group", "pads", "mode", "axis", "perm",
                "alpha", "auto_pad", "coordinate_transformation_mode", "ceil_mode")
# set on Erf nodes only: whether the node is the Erf of an exact GELU subgraph
IN_EXACT_GELU = "in_exact_gelu"


@dataclass(frozen=True)
class Row:
    node: str
    op_type: str
    attrs: dict[str, Any]
    status: dict[str, str]  # target name -> supported | lowered | unsupported
    hints: dict[str, str]


@dataclass(frozen=True)
class Report:
    targets: list[str]
    rows: list[Row]

    def problems(self) -> list[tuple[Row, str]]:
        return [(r, t) for r in self.rows for t in self.targets if r.status[t] == "unsupported"]

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for t in self.targets:
            c = {"supported": 0, "lowered": 0, "unsupported": 0}
            for r in self.rows:
                c[r.status[t]] += 1
            out[t] = c
        return out

    def to_json(self) -> dict[str, Any]:
        return {"targets": self.targets, "counts": self.counts(),
                "rows": [asdict(r) for r in self.rows]}

    def unsupported_nodes(self, target: str) -> list[dict[str, str]]:
        """The nodes ``target`` cannot express, with the hint its rules give."""
        return [{"node": r.node, "op_type": r.op_type, "hint": r.hints[target]}
                for r in self.rows if r.status[target] == "unsupported"]

    def raise_for_unsupported(self, skip: bool = False) -> list[str]:
        """Stop before any work when a requested target cannot express a node. With
        ``skip`` (``--skip-unsupported``) return those targets instead, in profile order,
        for the build to go on without; it stops anyway when none would be left."""
        problems = self.problems()
        if not problems:
            return []
        blocked = [t for t in self.targets if any(r.status[t] == "unsupported"
                                                  for r in self.rows)]
        if skip and len(blocked) < len(self.targets):
            return blocked
        lines = [f"  {r.node} ({r.op_type}) -> {t}: {r.hints[t] or 'not supported'}"
                 for r, t in problems[:20]]
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        none_left = " (--skip-unsupported leaves no target to build)" if skip else ""
        raise UnsupportedOpError(
            f"{len(problems)} node(s) cannot be converted for the requested targets"
            f"{none_left}:\n" + "\n".join(lines) + more,
            fix="replace the op in the model, drop the target from the profile, or pass "
                "--skip-unsupported to build the other targets; "
                "`edgesmith inspect MODEL --profile P` shows the full table",
        )


def _attrs(node) -> dict[str, Any]:
    import onnx

    out: dict[str, Any] = {}
    for a in node.attribute:
        value = onnx.helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        if isinstance(value, list | tuple | int | float | str):
            out[a.name] = list(value) if isinstance(value, list | tuple) else value
    if node.domain:
        out["domain"] = node.domain
    return out


def check(onnx_path: Path, targets_of_profile: list[tuple[TargetSpec, Target]]) -> Report:
    """Ask each (profile target, its format's Target) about every node. The caller
    resolves formats (``pipeline.registry``), so this room never imports the pipeline."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    targets = [(spec.name, target, spec.precision.value) for spec, target in targets_of_profile]
    gelu_erfs = exact_gelu_erfs(model)
    rows = []
    for i, node in enumerate(model.graph.node):
        attrs = _attrs(node)
        if node.op_type == "Erf":  # graph context a per-node rule cannot see (TFLite int8)
            attrs[IN_EXACT_GELU] = node.output[0] in gelu_erfs
        status, hints = {}, {}
        for name, target, precision in targets:
            rule = target.rule_for(node.op_type, attrs, precision)
            status[name], hints[name] = rule.status, rule.hint
        shown = {k: v for k, v in attrs.items() if k in _SHOWN_ATTRS or k == "domain"}
        rows.append(Row(node.name or f"{node.op_type}_{i}", node.op_type, shown, status, hints))
    return Report([name for name, _, _ in targets], rows)
