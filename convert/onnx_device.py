"""The ONNX target's loader on a device: onnxruntime, run by the uploaded bench script.

This file is not imported there: ``devices/script.py`` embeds its source in the one-file
bench script, which runs it in a namespace of its own (see ``devices/remote.py``, "format
loaders"). So it imports only the standard library at module level and must stay
Python 3.8 compatible; ``rt`` is the script's helper API.
"""

# (module, distribution) a device may have for this format: `verify` reports their versions
RUNTIMES = (("onnxruntime", "onnxruntime"),)
# imported (and timed) before the load, so load_ms is the model's cost, not the library's
IMPORTS = ("onnxruntime",)
PACKAGE = "onnxruntime (pip install onnxruntime)"
# the target's ``graph_optimization`` option -> onnxruntime's level: the build's validation
# (convert/onnx_qdq.py) and the device use the same table
GRAPH_OPTIMIZATION = {"all": "ORT_ENABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                      "none": "ORT_DISABLE_ALL"}


def session(args, rt):
    """The onnxruntime session the device times: the target's threads and graph
    optimisation level, as the build's validation ran it."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise rt.Missing(PACKAGE) from None
    so = ort.SessionOptions()
    if args.threads:
        so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    level = GRAPH_OPTIMIZATION[args.options.get("graph_optimization", "all")]
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    return ort.InferenceSession(args.model, so, providers=["CPUExecutionProvider"])


def load(args, sample_shape, rt):
    np = rt.numpy()
    sess = session(args, rt)
    import onnxruntime as ort
    inp = sess.get_inputs()[0]
    dtype = np.float16 if inp.type == "tensor(float16)" else np.float32
    name = inp.name

    def prepare(flat):
        return np.asarray(flat, dtype=dtype).reshape((1,) + sample_shape)

    def run(feed):
        return sess.run(None, {name: feed})[0]

    def to_list(out):
        return np.asarray(out, dtype=np.float64).ravel().tolist()

    return "onnxruntime", rt.version("onnxruntime", ort), prepare, run, to_list
