"""edgesmith: take a trained PyTorch model to edge devices.

The product's rooms live in top-level folders mapped into this namespace
(``edgesmith.cli``, ``edgesmith.convert``, ...); this package holds only what
every room shares: the version and the error hierarchy.
"""

__version__ = "0.1.0"
