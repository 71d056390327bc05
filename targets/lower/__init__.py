"""Per-op lowering, one module per op family.

The float lowerers outgrew one file; split by family, a family can be read and changed
without scrolling past the others, and ``common`` holds what two or more of them (and
the INT8 lowerings, ``int8`` and ``int8_eltwise``) share. Importing this package is
what registers the lowerers: each module's ``@lowers`` decorators (and the INT8 modules'
table updates) fill ``ir.LOWER`` / ``ir.LOWER_INT8`` at import time. ``ir._load_ops``
imports it lazily because these modules import ``ir`` themselves.
"""

from . import conv, elementwise, int8, int8_eltwise, linear, normalize, pool, resize, shape  # noqa: F401
