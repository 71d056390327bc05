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


def load(args, sample_shape, rt):
    np = rt.numpy()
    core = _core(rt)
    config = {"PERFORMANCE_HINT": "LATENCY"}
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
