"""Per-op lowering, one module per op family.

The float lowerers outgrew one file; split by family, a family can be read and changed
without scrolling past the others, and ``common`` holds what two or more of them (and
the INT8 lowering) share. Importing this package is what registers the lowerers: each
module's ``@lowers`` decorators fill ``ir.LOWER`` at import time. ``ir._load_ops`` imports
it lazily because these modules import ``ir`` themselves.
"""

from . import conv, elementwise, linear, normalize, pool, resize, shape  # noqa: F401
