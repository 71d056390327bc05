"""The TFLite target's loader on a device: ai-edge-litert (or tflite-runtime), run by the
uploaded bench script.

Embedded, not imported, there (``devices/script.py``): standard library only at module
level, Python 3.8 compatible; ``rt`` is the script's helper API. The I/O handling mirrors
``convert/tflite.py``'s runner: NCHW inputs moved to the channels-last layout onnx2tf
models take, int8 I/O quantized with the tensor's own scale and zero point.
"""

RUNTIMES = (("ai_edge_litert", "ai-edge-litert"), ("tflite_runtime", "tflite-runtime"))
IMPORTS = ("ai_edge_litert.interpreter", "tflite_runtime.interpreter")
PACKAGE = "ai-edge-litert (pip install ai-edge-litert; or tflite-runtime)"


def _interpreter(rt):
    try:
        from ai_edge_litert.interpreter import Interpreter
        return "ai-edge-litert", rt.version("ai-edge-litert"), Interpreter
    except ImportError:
        pass
    try:
        from tflite_runtime.interpreter import Interpreter
        return "tflite-runtime", rt.version("tflite-runtime"), Interpreter
    except ImportError:
        pass
    raise rt.Missing(PACKAGE)


def load(args, sample_shape, rt):
    np = rt.numpy()
    name, version, Interpreter = _interpreter(rt)
    interp = Interpreter(model_path=args.model, num_threads=args.threads or None)
    interp.allocate_tensors()
    inp = interp.get_input_details()[0]
    out = interp.get_output_details()[0]
    want = tuple(int(d) for d in inp["shape"][1:])

    def prepare(flat):
        x = np.asarray(flat, dtype=np.float32).reshape((1,) + sample_shape)
        if x.ndim >= 3 and tuple(x.shape[1:]) != want:
            moved = np.moveaxis(x, 1, -1)  # NCHW -> NHWC, what onnx2tf models take
            if tuple(moved.shape[1:]) == want:
                x = np.ascontiguousarray(moved)
        if inp["dtype"] in (np.int8, np.uint8):
            scale, zero = inp["quantization"]
            info = np.iinfo(inp["dtype"])
            x = np.clip(np.round(x / scale + zero), info.min, info.max)
        return x.astype(inp["dtype"])

    def run(feed):
        interp.set_tensor(inp["index"], feed)
        interp.invoke()
        return interp.get_tensor(out["index"])

    def to_list(y):
        y = np.asarray(y)
        if out["dtype"] in (np.int8, np.uint8):
            scale, zero = out["quantization"]
            y = (y.astype(np.float64) - zero) * scale
        if y.ndim >= 3:
            y = np.moveaxis(y, -1, 1)  # channels-last outputs back to the ONNX layout
        return np.asarray(y, dtype=np.float64).ravel().tolist()

    return name, version, prepare, run, to_list
