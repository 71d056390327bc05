"""edgesmith: take a trained PyTorch model to edge devices.

The product's rooms live in top-level folders mapped into this namespace
(``edgesmith.cli``, ``edgesmith.convert``, ...); this package is the leaf core that every
room shares and that imports no room: the version, the error hierarchy (``errors``), the
``Target`` interface and what it is handed (``target``), ``Artifact`` and atomic writes
(``artifact``), build-folder publishing and locking (``outdir``), tool versions
(``versions``) and fd-level output capture (``capture``).
"""

__version__ = "0.1.0"
