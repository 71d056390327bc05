"""The OpenVINO target's loader on a device, run by the uploaded bench script.

Embedded, not imported, there (``devices/script.py``): standard library only at module
level, Python 3.8 compatible; ``rt`` is the script's helper API.
"""

RUNTIMES = (("openvino", "openvino"),)
IMPORTS = ("openvino",)
PACKAGE = "openvino (pip install openvino)"


def _core(rt):
    try:
        import openvino as ov
        return ov.Core()
    except (ImportError, AttributeError):
        try:
            from openvino.runtime import Core
            return Core()
        except ImportError:
            raise rt.Missing(PACKAGE) from None


def _f32_hint(core):
    """``INFERENCE_PRECISION_HINT: f32`` where the release knows the property (2022.1+).
    Without it a CPU with AVX-512 BF16 or AMX runs the model in bfloat16 (the default
    there), and its outputs differ from the host's f32 run by about 1e-2 of their range."""
    try:
        return "INFERENCE_PRECISION_HINT" in core.get_property("CPU", "SUPPORTED_PROPERTIES")
    except Exception:  # an old release without the query: leave its default
        return False


def load(args, sample_shape, rt):
    np = rt.numpy()
    core = _core(rt)
    config = {"PERFORMANCE_HINT": "LATENCY"}
    if _f32_hint(core):
        config["INFERENCE_PRECISION_HINT"] = "f32"
    if args.threads:
        config["INFERENCE_NUM_THREADS"] = args.threads
    compiled = core.compile_model(core.read_model(args.model), "CPU", config)
    request = compiled.create_infer_request()

    def prepare(flat):
        return np.asarray(flat, dtype=np.float32).reshape((1,) + sample_shape)

    def run(feed):
        request.infer({0: feed})
        return request.get_output_tensor(0).data

    def to_list(y):
        return np.asarray(y, dtype=np.float64).ravel().tolist()

    return "openvino", rt.version("openvino"), prepare, run, to_list
