"""Structured channel pruning with torch-pruning's DependencyGraph.

Channels are removed for real (the result is a smaller ``nn.Module``, not a mask): the
dependency graph finds every layer coupled to a pruned channel (the BN after a conv,
the depthwise conv that shares its channels, both arms of a residual add, the classifier's
input) and cuts them together. The target is either a channel ratio (one step) or a MACs
reduction (small steps until the measured MACs reach the target).

Before pruning we check that the graph torch-pruning traces is whole: a forward pass that
leaves autograd (``.numpy()``, ``.item()``-driven rebuilds, a TorchScript module) hides
dependencies, and the "pruned" model would fail or silently lose accuracy. Such a model is
refused with the name of the module where the trace breaks.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from edgesmith.errors import ModelLoadError, UsageError

from .artifacts import onnx_bytes, state_dict_bytes

IMPORTANCES = ("magnitude", "l2", "bn_scale", "taylor")
MACS_STEP = 0.01  # ratio increment per step when aiming at a MACs reduction
MAX_RATIO = 0.95  # never remove more than this fraction of any group's channels


@dataclass
class PruneResult:
    model: nn.Module
    report: dict[str, Any] = field(default_factory=dict)


def count(model: nn.Module, example: torch.Tensor) -> tuple[int, int]:
    """(MACs, params) as torch-pruning counts them."""
    import torch_pruning as tp

    was_training = model.training
    model.eval()
    try:
        macs, params = tp.utils.count_ops_and_params(model, example)
    finally:
        model.train(was_training)
    return int(macs), int(params)


def _importance(name: str) -> Any:
    import torch_pruning as tp

    if name == "magnitude":
        return tp.importance.GroupMagnitudeImportance(p=1)
    if name == "l2":
        return tp.importance.GroupMagnitudeImportance(p=2)
    if name == "bn_scale":
        return tp.importance.BNScaleImportance()
    if name == "taylor":
        return tp.importance.GroupTaylorImportance()
    raise UsageError(f"unknown importance {name!r}", fix=f"use one of {', '.join(IMPORTANCES)}")


def _execution_order(model: nn.Module, example: torch.Tensor) -> list[str]:
    """Names of the leaf modules in the order a forward pass runs them."""
    order: list[str] = []
    hooks = [m.register_forward_pre_hook(lambda _m, _i, n=name: order.append(n))
             for name, m in model.named_modules() if name and not list(m.children())]
    try:
        with torch.no_grad():
            model(example)
    finally:
        for h in hooks:
            h.remove()
    return order


def default_ignored(model: nn.Module, example: torch.Tensor) -> list[str]:
    """The classifier: the last Linear (else the last conv) to run in a forward pass."""
    modules = dict(model.named_modules())
    order = _execution_order(model, example)
    for kinds in ((nn.Linear,), (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        last = [n for n in order if isinstance(modules[n], kinds)]
        if last:
            return [last[-1]]
    return []


def resolve_ignored(model: nn.Module, names: Iterable[str], *,
                    where: str = "compress.prune.ignored_layers") -> list[nn.Module]:
    """Module objects for ``names``; an unknown name lists the closest real ones."""
    modules = {n: m for n, m in model.named_modules() if n}
    out = []
    for name in names:
        if name not in modules:
            close = difflib.get_close_matches(name, list(modules), n=5, cutoff=0.4)
            hint = f"did you mean {', '.join(close)}?" if close else \
                f"module names look like {', '.join(list(modules)[:5])}"
            raise UsageError(f"ignored layer {name!r} is not a module of the model",
                             where=where, fix=hint)
        out.append(modules[name])
    return out


def check_traceable(model: nn.Module, example: torch.Tensor) -> None:
    """Refuse a model whose forward leaves autograd (torch-pruning would miss dependencies).

    With ``example.requires_grad``, every tensor computed from the input carries a
    ``grad_fn``; a leaf module whose input has none (and is not the input itself) receives
    a tensor that was rebuilt outside autograd, so the trace breaks right before it.
    """
    if isinstance(model, torch.jit.ScriptModule):
        raise ModelLoadError(
            "a TorchScript module cannot be pruned: torch-pruning traces Python modules",
            where=type(model).__name__,
            fix="pass the Python model (file.py:build or a state dict with --arch)",
        )
    x = example.detach().clone().requires_grad_(True)
    broken: list[str] = []

    def pre(mod: nn.Module, inputs: tuple[Any, ...], name: str) -> None:
        if broken:
            return
        for t in inputs:
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t is not x \
                    and t.grad_fn is None and not t.requires_grad:
                broken.append(name)
                return

    hooks = [m.register_forward_pre_hook(lambda mod, inp, n=name: pre(mod, inp, n))
             for name, m in model.named_modules() if name and not list(m.children())]
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            model(x)
    except Exception as e:
        raise ModelLoadError(f"forward pass failed before pruning: {type(e).__name__}: {e}",
                             where=type(model).__name__) from None
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    if broken:
        name = broken[0]
        raise ModelLoadError(
            f"torch-pruning cannot trace this model: the input of module {name!r} "
            f"({type(dict(model.named_modules())[name]).__name__}) was computed outside "
            "autograd (e.g. .numpy(), torch.tensor(...) of a result, .detach())",
            where=f"{type(model).__name__}.{name}",
            fix="keep the forward pass in torch ops, or add the module and everything "
                "before it to compress.prune.ignored_layers",
        )


def _pop(stack: list[str]) -> None:
    """Forward hooks must return None (a returned value replaces the module's output)."""
    if stack:
        stack.pop()


def _failing_module(model: nn.Module, example: torch.Tensor) -> tuple[str, Exception] | None:
    """Run a forward pass; on failure, the innermost module that was running and the error."""
    stack: list[str] = []
    hooks = []
    for name, m in model.named_modules():
        if not name:
            continue
        hooks.append(m.register_forward_pre_hook(lambda _m, _i, n=name: stack.append(n)))
        hooks.append(m.register_forward_hook(lambda _m, _i, _o: _pop(stack)))
    try:
        with torch.no_grad():
            model(example)
        return None
    except Exception as e:
        return (stack[-1] if stack else "<forward>"), e
    finally:
        for h in hooks:
            h.remove()


def _channels(model: nn.Module) -> dict[str, int]:
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.conv._ConvNd):
            out[name] = m.out_channels
        elif isinstance(m, nn.Linear):
            out[name] = m.out_features
    return out


def _check_settings(settings: Any, data: Any) -> None:
    ratio, macs_target = settings.ratio, settings.macs_reduction
    if ratio is None and macs_target is None:
        raise UsageError("pruning is enabled but neither ratio nor macs_reduction is set",
                         where="compress.prune",
                         fix="set compress.prune.ratio or macs_reduction, or pass --prune-ratio")
    for label, v in (("ratio", ratio), ("macs_reduction", macs_target)):
        if v is not None and not 0 < v < 1:
            raise UsageError(f"pruning {label} must be between 0 and 1 (exclusive), got {v}",
                             where=f"compress.prune.{label}",
                             fix="e.g. 0.3 removes 30% of the channels of each prunable layer")
    if settings.importance == "taylor" and data is None:
        raise UsageError("taylor importance needs training data for its gradients")


def _pruner(model: nn.Module, example: torch.Tensor, settings: Any, ignored: list[nn.Module],
            steps: int, final_ratio: float) -> Any:
    import torch_pruning as tp

    try:
        return tp.pruner.MetaPruner(
            model, example, importance=_importance(settings.importance),
            global_pruning=settings.global_pruning, pruning_ratio=final_ratio,
            iterative_steps=steps, ignored_layers=ignored, round_to=settings.round_to,
        )
    except Exception as e:
        raise ModelLoadError(
            f"torch-pruning cannot build the dependency graph: {type(e).__name__}: {e}",
            where=type(model).__name__,
            fix="add the offending module to compress.prune.ignored_layers",
        ) from None


def _step_until_done(model: nn.Module, example: torch.Tensor, settings: Any, pruner: Any,
                     steps: int, macs0: int, data: Any) -> int:
    """Prune step by step (one step for a fixed ratio) until the MACs target is reached."""
    taken = 0
    for _ in range(steps):
        if settings.importance == "taylor":
            _taylor_grads(model, data)
        pruner.step()
        taken += 1
        macs, _ = count(model, example)
        if settings.macs_reduction is not None and 1 - macs / macs0 >= settings.macs_reduction:
            break
    model.zero_grad(set_to_none=True)
    return taken


def _check_pruned(model: nn.Module, example: torch.Tensor, macs0: int,
                  macs_target: float | None) -> tuple[int, int]:
    """The pruned model must still run, and reach the MACs target; returns (MACs, params)."""
    failed = _failing_module(model, example)
    if failed is not None:
        name, err = failed
        raise ModelLoadError(
            f"the pruned model fails in module {name!r}: {type(err).__name__}: "
            f"{str(err)[:200]} (its forward likely hard-codes a channel count torch-pruning "
            "cannot see, e.g. x.view(n, 128))",
            where=f"{type(model).__name__}.{name}",
            fix=f"use shape-agnostic ops (flatten) or add {name!r} and the layers feeding it "
                "to compress.prune.ignored_layers",
        )
    macs1, params1 = count(model, example)
    if macs_target is not None and 1 - macs1 / macs0 < macs_target:
        raise UsageError(
            f"pruning reached only {100 * (1 - macs1 / macs0):.1f}% MACs reduction "
            f"(asked {100 * macs_target:.1f}%) at the maximum ratio {MAX_RATIO}",
            where="compress.prune.macs_reduction",
            fix="lower macs_reduction, or remove layers from ignored_layers",
        )
    return macs1, params1


def prune(
    model: nn.Module,
    example: torch.Tensor,
    settings: Any,
    *,
    data: tuple[np.ndarray, np.ndarray] | None = None,
    measure_onnx: bool = True,
) -> PruneResult:
    """Prune ``model`` in place per ``settings`` (a ``profiles.schema.Prune``).

    ``data`` (inputs, labels) feeds the gradients Taylor importance needs (a few batches of
    the training split). The report holds MACs, params, state-dict and ONNX sizes before
    and after, the achieved MACs reduction and the channel widths that changed.
    """
    _check_settings(settings, data)
    ratio, macs_target = settings.ratio, settings.macs_reduction
    model.eval()
    check_traceable(model, example)
    ignored_names = list(settings.ignored_layers) if settings.ignored_layers is not None \
        else default_ignored(model, example)
    ignored = resolve_ignored(model, ignored_names)

    macs0, params0 = count(model, example)
    sd0 = state_dict_bytes(model)
    onnx0 = onnx_bytes(model, example) if measure_onnx else None
    ch0 = _channels(model)

    # a fixed ratio is one step; a MACs target steps up to MAX_RATIO until it is reached
    steps, final_ratio = (1, ratio) if ratio is not None else \
        (int(round(MAX_RATIO / MACS_STEP)), MAX_RATIO)
    pruner = _pruner(model, example, settings, ignored, steps, final_ratio)
    taken = _step_until_done(model, example, settings, pruner, steps, macs0, data)
    macs1, params1 = _check_pruned(model, example, macs0, macs_target)
    ch1 = _channels(model)
    report: dict[str, Any] = {
        "importance": settings.importance,
        "target": {"ratio": ratio} if ratio is not None else {"macs_reduction": macs_target},
        "global_pruning": settings.global_pruning,
        "round_to": settings.round_to,
        "ignored_layers": ignored_names,
        "steps": taken,
        "macs_before": macs0, "macs_after": macs1,
        "macs_reduction": round(1 - macs1 / macs0, 6) if macs0 else 0.0,
        "params_before": params0, "params_after": params1,
        "state_dict_bytes_before": sd0, "state_dict_bytes_after": state_dict_bytes(model),
        "channels": {n: [ch0[n], ch1[n]] for n in ch1 if n in ch0 and ch0[n] != ch1[n]},
    }
    if measure_onnx:
        report["onnx_bytes_before"] = onnx0
        report["onnx_bytes_after"] = onnx_bytes(model, example)
    return PruneResult(model=model, report=report)


def _taylor_grads(model: nn.Module, data: tuple[np.ndarray, np.ndarray] | None,
                  batches: int = 4, batch_size: int = 64) -> None:
    """Accumulate loss gradients on a few training batches (Taylor importance reads them)."""
    assert data is not None
    x, y = data
    model.zero_grad(set_to_none=True)
    was_training = model.training
    model.eval()
    loss_fn = nn.CrossEntropyLoss()
    try:
        for i in range(0, min(len(x), batches * batch_size), batch_size):
            xb = torch.as_tensor(x[i:i + batch_size], dtype=torch.float32)
            yb = torch.as_tensor(y[i:i + batch_size], dtype=torch.long)
            loss_fn(model(xb), yb).backward()
    finally:
        model.train(was_training)
