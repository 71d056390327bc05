"""coremltools 9.0 under numpy >= 2.4: the torch frontend's ``int``/``bool`` casts, fixed.

Why this exists: numpy 2.4 made ``int(np.array([3]))`` an error ("only 0-dimensional
arrays can be converted to Python scalars"; a deprecation since 1.25). coremltools 9.0's
torch frontend does exactly that in ``_cast`` whenever a traced model turns a shape into a
Python int (``aten::Int``): attention's ``bsz * num_heads``, a GRU's ``h0`` sized by
``x.size(0)``, any ``view(x.size(0), -1)``. Every such model failed to convert with that
TypeError. Upstream fixed it after the 9.0 release (apple/coremltools#2632/#2633); until a
release carries the fix, ``install()`` registers the fixed conversion through coremltools'
own extension point (``register_torch_op(override=True)``). The fix takes the value with
``.item()``, as upstream does; everything else is coremltools' code as 9.0 has it.

Named with a leading underscore so the target registry's discovery skips it.
"""

from __future__ import annotations

import functools

import numpy as np


def needed() -> bool:
    """True when numpy refuses ``int()`` of a 1-element array and coremltools' own ``_cast``
    still does it: asked of the installed code itself, so a fixed release is left alone."""
    import inspect

    from coremltools.converters.mil.frontend.torch import ops

    try:
        int(np.zeros(1))
        return False  # numpy older than 2.4: the original code works
    except TypeError:
        pass
    return "dtype(x.val)" in inspect.getsource(ops._cast)  # noqa: SLF001 - what it replaces


@functools.cache
def install() -> bool:
    """Register the fixed ``int``/``bool`` conversions once per process when ``needed()``;
    returns whether it did."""
    if not needed():
        return False
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.frontend.torch import register_torch_op
    from coremltools.converters.mil.frontend.torch.ops import _get_inputs

    def cast(context, node, dtype, dtype_name: str) -> None:
        x = _get_inputs(context, node, expected=1)[0]
        if not (len(x.shape) == 0 or all(d == 1 for d in x.shape)):
            raise ValueError("input to cast must be either a scalar or a length 1 tensor")
        if x.can_be_folded_to_const():
            value = x.val
            if not isinstance(value, dtype):
                value = dtype(np.asarray(value).reshape(-1)[0].item())  # the fix
                x = mb.const(val=value, name=node.name)
            context.add(x, node.name)
            return
        if len(x.shape) > 0:
            x = mb.squeeze(x=x, name=node.name + "_item")
        context.add(mb.cast(x=x, dtype=dtype_name, name=node.name), node.name)

    def _int(context, node) -> None:
        cast(context, node, int, "int32")

    def _bool(context, node) -> None:
        cast(context, node, bool, "bool")

    register_torch_op(_int, torch_alias=["int"], override=True)
    register_torch_op(_bool, torch_alias=["bool"], override=True)
    return True
