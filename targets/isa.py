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
# the M-profile architectures (ACLE names one of these for every Cortex-M core): a
# microcontroller, whose weights live in flash and must stay int8 there
MCU_ARCHS = frozenset({"__ARM_ARCH_6M__", "__ARM_ARCH_7M__", "__ARM_ARCH_7EM__",
                       "__ARM_ARCH_8M_BASE__", "__ARM_ARCH_8M_MAIN__",
                       "__ARM_ARCH_8_1M_MAIN__"})
DSP = "__ARM_FEATURE_DSP"  # SMLAD / SXTB16 (Cortex-M4, M7, M33, M55)
MVE = "__ARM_FEATURE_MVE"  # Helium (Cortex-M55, M85)


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


def is_mcu(isa: frozenset[str]) -> bool:
    """Whether predefined macros ``isa`` are a Cortex-M compiler's (weights in flash)."""
    return bool(isa & MCU_ARCHS)
