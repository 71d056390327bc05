"""Helium (MVE) for the Cortex-M55, behind its own flag: the profile's cross_cflags with
-mcpu=cortex-m55 make the compiler predefine __ARM_FEATURE_MVE, which compiles the MVE
paths of es_conv2d_i8_mcu (VMLADAVA on 16 int8 taps, four pixels a weight row) and
es_dwconv2d_i8_mcu (four output pixels in int32 lanes, VMLA a tap) and runs the image on
QEMU's Cortex-M55 board, mps3-an547. There the outputs equal the reference kernels'
(host) bit for bit, on odd one-group and depthwise geometries and on the digits CNN."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_tools
from tests.targets.test_dwconv_mcu import dw_qdq  # noqa: F401
from tests.targets.test_mcu_kernels import M7_CC, generate_for, geometry_qdq  # noqa: F401

M55_FLAGS = "-O2 -mcpu=cortex-m55 -mthumb -mfloat-abi=hard"
KERNELS = Path(__file__).parents[2] / "targets" / "runtime" / "kernels"


@pytest.fixture(autouse=True)
def _tools() -> None:
    """The Makefile installs these: missing is a broken setup, a failure, not a skip."""
    require_tools("qemu-system-arm", M7_CC)


def _asm(src: str, flags: str) -> str:
    p = subprocess.run([M7_CC, *flags.split(), "-std=c99", "-Wall", "-Wextra", "-Werror",
                        "-S", "-o", "-", str(KERNELS / src)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_cortex_m55_flags_compile_the_helium_kernels_and_pick_the_an547_board():
    """MVE instructions in the M55 build of both MCU kernels, none in the M7 build (same
    sources: the flag alone decides), and mcu_qemu runs each on its own board."""
    from edgesmith.targets import isa, mcu_qemu

    assert isa.MVE in isa.macros(M7_CC, M55_FLAGS) and isa.is_mcu(isa.macros(M7_CC, M55_FLAGS))
    conv, dw = _asm("conv_int8_mcu.c", M55_FLAGS), _asm("dwconv_int8_mcu.c", M55_FLAGS)
    assert "vmladava.s8" in conv and "vctp.8" in conv
    assert "vmla.s32" in dw and "vctp.32" in dw
    m7 = _asm("conv_int8_mcu.c", mcu_qemu.CFLAGS) + _asm("dwconv_int8_mcu.c", mcu_qemu.CFLAGS)
    assert "vmladava" not in m7 and "smlad" in m7
    assert mcu_qemu.board_for(M7_CC, M55_FLAGS).machine == "mps3-an547"
    assert mcu_qemu.board_for(M7_CC, mcu_qemu.CFLAGS).machine == "mps2-an500"


def test_odd_conv_geometries_on_emulated_cortex_m55_equal_reference_kernels(
        geometry_qdq, tmp_path):  # noqa: F811
    """K = 27, 63, 45, 5, 225 (the 16-tap loads' predicated tails), a lone last pixel
    group, stride 2, dilation 2, asymmetric padding (x_zp at padded taps)."""
    from edgesmith.targets import mcu_qemu, run

    qdq, x = geometry_qdq
    ref = generate_for(qdq, tmp_path / "ref", kernels="reference", cc=None)
    m55 = generate_for(qdq, tmp_path / "m55", cflags=M55_FLAGS)
    assert "es_conv2d_i8_mcu" in (m55 / "model.c").read_text()
    np.testing.assert_array_equal(mcu_qemu.run(m55, x[:4], cflags=M55_FLAGS),
                                  run.run(ref, x[:4]))


def test_depthwise_on_emulated_cortex_m55_equals_reference_kernels(dw_qdq, tmp_path):  # noqa: F811
    """Stride 1 (contiguous widening loads) and 2 (gathers), dilation 2, 5x5, 2x4 and 1x3
    kernels, row lengths that leave a predicated last vector."""
    from edgesmith.targets import mcu_qemu, run

    qdq, x = dw_qdq
    ref = generate_for(qdq, tmp_path / "ref", kernels="reference", cc=None)
    m55 = generate_for(qdq, tmp_path / "m55", cflags=M55_FLAGS)
    assert "es_dwconv2d_i8_mcu" in (m55 / "model.c").read_text()
    np.testing.assert_array_equal(mcu_qemu.run(m55, x[:4], cflags=M55_FLAGS),
                                  run.run(ref, x[:4]))


def test_digits_cnn_on_emulated_cortex_m55_equals_host_bit_for_bit(digits_qdq, digits_splits,
                                                                   tmp_path):
    from edgesmith.targets import mcu_qemu, run

    folder = generate_for(digits_qdq, tmp_path / "m55", cflags=M55_FLAGS)
    x = digits_splits.val_x[:4]
    on_mcu = mcu_qemu.run(folder, x, cflags=M55_FLAGS)
    np.testing.assert_array_equal(on_mcu, run.run(folder, x))
    assert len(set(on_mcu.argmax(1))) > 1  # trained weights: it classifies



@pytest.mark.parametrize(("cflags", "says"), [
    ("-O2 -mcpu=cortex-m99", "rejects the flags"), ("-O2", "do not target a Cortex-M core")])
def test_flags_the_compiler_rejects_or_not_for_a_cortex_m_are_a_usage_error(tmp_path, cflags,
                                                                           says):
    """Exit 2 naming --cflags and the flags to use, before any link (it was exit 4 with
    the compiler's CPU list and a fix about region overflows)."""
    from edgesmith.errors import UsageError
    from edgesmith.targets import mcu_qemu

    (tmp_path / "Makefile").write_text("SRCS =\n")
    with pytest.raises(UsageError) as e:
        mcu_qemu.build_image(tmp_path, tmp_path / "x.elf", cflags=cflags)
    msg = e.value.message()
    assert e.value.exit_code == 2 and says in msg and "--cflags" in msg, msg
    assert "cortex-m7" in msg and "-mthumb" in msg  # the fix names what to pass
