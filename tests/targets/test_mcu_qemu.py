"""The Cortex-M7 build runs on an emulated Cortex-M7 (QEMU's mps2-an500) and its int8
outputs equal the host C runtime's bit for bit: the DSP kernel paths (SXTB16 + SMLAD),
the bare-metal start-up and the flash-resident weights checked by running them."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import require_tools
from tests.targets.test_mcu_kernels import generate_for, geometry_qdq  # noqa: F401


@pytest.fixture(autouse=True)
def _tools() -> None:
    """The Makefile installs these: missing is a broken setup, a failure, not a skip."""
    require_tools('qemu-system-arm', 'arm-none-eabi-gcc')


def test_digits_cnn_on_emulated_cortex_m7_equals_host_bit_for_bit(digits_qdq, digits_splits,
                                                                  tmp_path):
    from edgesmith.targets import mcu_qemu, run

    folder = generate_for(digits_qdq, tmp_path / "m7")
    x = digits_splits.val_x[:6]
    host = run.run(folder, x)
    on_mcu = mcu_qemu.run(folder, x)
    np.testing.assert_array_equal(on_mcu, host)
    # trained weights: the emulated MCU classifies, not only repeats a constant
    assert len(set(on_mcu.argmax(1))) > 1


def test_int8_input_model_on_emulated_cortex_m7_equals_float_input_host(digits_qdq,
                                                                         digits_splits,
                                                                         tmp_path):
    """C option input: int8 (as a camera hands over 8-bit pixels): the image reads int8
    bytes, not float32, and gives the float-input host model's output bit for bit."""
    from edgesmith.targets import codegen, isa, mcu_qemu, run
    from edgesmith.targets.int8_input import fold_input_quantize
    from edgesmith.targets.ir import lower
    from edgesmith.targets.planner import plan
    from tests.targets.test_mcu_kernels import M7_CC, M7_FLAGS

    g = fold_input_quantize(lower(digits_qdq, "int8", isa.macros(M7_CC, M7_FLAGS)))
    folder = tmp_path / "m7_i8in"
    codegen.generate(g, plan(g), folder, embedded=True)
    x = digits_splits.val_x[:4]
    host = run.run(generate_for(digits_qdq, tmp_path / "m7"), x)
    np.testing.assert_array_equal(mcu_qemu.run(folder, x), host)


def test_odd_conv_geometries_on_emulated_cortex_m7_equal_reference_kernels(geometry_qdq,  # noqa: F811
                                                                           tmp_path):
    from edgesmith.targets import mcu_qemu, run

    qdq, x = geometry_qdq
    ref = generate_for(qdq, tmp_path / "ref", kernels="reference", cc=None)
    np.testing.assert_array_equal(mcu_qemu.run(generate_for(qdq, tmp_path / "m7"), x[:4]),
                                  run.run(ref, x[:4]))


def test_a_model_too_big_for_the_board_is_a_clear_error(tmp_path):
    """The image does not fit mps2-an500's 4 MB of flash: exit 4 with what and the fix."""
    from edgesmith.errors import ConversionError
    from edgesmith.targets import mcu_qemu

    folder = tmp_path / "big"
    folder.mkdir()
    (folder / "Makefile").write_text("SRCS = big.c\n")
    (folder / "model.h").write_text('#include <stddef.h>\n#define ES_ARENA_BYTES 64u\n'
                                    '#define ES_ARENA_ALIGN 8u\n#define ES_INPUT0_ELEMS 1u\n'
                                    '#define ES_OUTPUT0_ELEMS 1u\n#define ES_WEIGHTS_BYTES 1u\n'
                                    '#define ES_OK 0\ntypedef int es_model;\n'
                                    'int es_init(es_model *, void *, size_t, const char *);\n'
                                    'int es_input(es_model *, int, const void *, size_t);\n'
                                    'int es_run(es_model *, const void *);\n'
                                    'int es_output(es_model *, int, void *, size_t);\n'
                                    'void es_deinit(es_model *);\n'
                                    'const char *es_strerror(int);\n')
    (folder / "big.c").write_text(
        '#include "model.h"\nconst unsigned char blob[5u << 20] = {1};\n'
        'int es_init(es_model *m, void *a, size_t n, const char *w) '
        '{ (void)m; (void)a; (void)n; (void)w; return blob[0] - 1; }\n'
        'int es_input(es_model *m, int i, const void *d, size_t n) '
        '{ (void)m; (void)i; (void)d; (void)n; return 0; }\n'
        'int es_run(es_model *m, const void *h) { (void)m; (void)h; return 0; }\n'
        'int es_output(es_model *m, int i, void *d, size_t n) '
        '{ (void)m; (void)i; (void)d; (void)n; return 0; }\n'
        'void es_deinit(es_model *m) { (void)m; }\n'
        'const char *es_strerror(int c) { (void)c; return "x"; }\n')
    with pytest.raises(ConversionError) as e:
        mcu_qemu.build_image(folder, tmp_path / "big.elf")
    assert "4 MB flash" in e.value.fix and e.value.exit_code == 4
