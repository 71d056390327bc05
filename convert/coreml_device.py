"""The Core ML target's loader on a device (macOS only), run by the uploaded bench script.

Embedded, not imported, there (``devices/script.py``): standard library only at module
level, Python 3.8 compatible; ``rt`` is the script's helper API.
"""

import platform

RUNTIMES = (("coremltools", "coremltools"),)
IMPORTS = ("coremltools",)
PACKAGE = "coremltools (pip install coremltools; prediction needs macOS)"


def load(args, sample_shape, rt):
    if platform.system() != "Darwin":
        raise rt.Unsupported(
            f"Core ML prediction needs macOS; this device runs {platform.system()}")
    np = rt.numpy()
    try:
        import coremltools as ct
    except ImportError:
        raise rt.Missing(PACKAGE) from None
    model = ct.models.MLModel(args.model)
    desc = model.get_spec().description
    in_name, out_name = desc.input[0].name, desc.output[0].name

    def prepare(flat):
        return {in_name: np.asarray(flat, dtype=np.float32).reshape((1,) + sample_shape)}

    def run(feed):
        return model.predict(feed)[out_name]

    def to_list(y):
        return np.asarray(y, dtype=np.float64).ravel().tolist()

    return "coremltools", rt.version("coremltools", ct), prepare, run, to_list
