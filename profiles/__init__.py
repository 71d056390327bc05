"""Device profiles: schema, YAML loading with ``FILE:LINE`` errors, bundled profiles."""

from .loader import Located, bundled_names, load, load_located, resolve_path, validate
from .schema import Format, Precision, Profile, TargetSpec

__all__ = [
    "Format", "Located", "Precision", "Profile", "TargetSpec",
    "bundled_names", "load", "load_located", "resolve_path", "validate",
]
