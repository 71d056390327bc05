"""What the compiler that will build the generated C can target, asked of that compiler.

Kernels with a fast path whose weights need their own packing (the u8 x s8 dot-product
GEMM wants int8 quads, the AVX2/NEON GEMM int16 pairs) must be chosen when the C is
generated, not when it is compiled. The deciding compiler is the one that builds for the
device: its predefined macros under the profile's flags (``-march=native`` included) say
what the instructions are, with no CPU tables kept here. A compiler that cannot be run
answers "nothing", which selects the kernels that are fast everywhere.
"""

from __future__ import annotations

import shlex
import subprocess
from functools import lru_cache

# AVX-512 VNNI with the byte/word and 128/256-bit forms es_conv2d_i8_dot uses
VNNI = frozenset({"__AVX512VNNI__", "__AVX512BW__", "__AVX512VL__"})


@lru_cache(maxsize=32)
def macros(cc: str, cflags: str = "") -> frozenset[str]:
    """Names of the macros ``cc cflags`` predefines for C, or an empty set if it won't run."""
    try:
        out = subprocess.run([*shlex.split(cc), *shlex.split(cflags), "-dM", "-E", "-x", "c",
                              "/dev/null"], capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError, ValueError):
        return frozenset()
    return frozenset(line.split()[1] for line in out.splitlines()
                     if line.startswith("#define ") and len(line.split()) >= 2)


def has_vnni(cc: str, cflags: str = "") -> bool:
    return VNNI <= macros(cc, cflags)
