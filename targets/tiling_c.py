"""The C of a tiled segment (tiling.TiledStep): one case of es_run_step that runs the
segment patch by patch. Per patch: copy the input window into its patch buffer, run each
layer's unchanged kernel on the patch buffers with the patch's geometry (a conv gets the
patch's es_conv_params, an element-wise step the patch's element count; an Add whose skip
input holds a wider window first copies the rows it adds into its output buffer and adds
in place), then copy the patch's rows of the segment's output into the full tensor.

Kept apart from codegen.py (which calls ``tiled_case``) so the tiling room owns its code.
"""

from __future__ import annotations

from typing import Any

from .c_text import _comment, _fields, _wrap, c_float
from .graph import Ref
from .tiling import Patch, TiledStep, Win

_TILE_COPY = """/* ---- patch-based execution (tiling.py): C planes of a window copied
 *      between a full tensor and a patch buffer, row by row ---- */
typedef struct {
    int32_t C, rows, row_bytes;                     /* planes, rows per plane, bytes per row */
    int32_t src_off, src_row, src_plane;            /* bytes */
    int32_t dst_off, dst_row, dst_plane;            /* bytes */
} es_tile_window;

static void es_tile_copy(unsigned char *dst, const unsigned char *src,
                         const es_tile_window *p) {
    int32_t c, r;
    for (c = 0; c < p->C; ++c)
        for (r = 0; r < p->rows; ++r)
            es_copy(dst + p->dst_off + (size_t)c * p->dst_plane + (size_t)r * p->dst_row,
                    src + p->src_off + (size_t)c * p->src_plane + (size_t)r * p->src_row,
                    (size_t)p->row_bytes);
}"""

_TILE_QUANTIZE = """/* a window quantized from a float tensor into an int8 patch buffer, row by row
 * (QuantizeLinear is element-wise: the rows give what the whole tensor would) */
static void es_tile_quantize(int8_t *dst, const float *src, const es_tile_window *p,
                             float scale, int zp) {
    int32_t c, r;
    for (c = 0; c < p->C; ++c)
        for (r = 0; r < p->rows; ++r)
            es_quantize_f32_i8(src + p->src_off + (size_t)c * p->src_plane
                               + (size_t)r * p->src_row,
                               dst + p->dst_off + (size_t)c * p->dst_plane
                               + (size_t)r * p->dst_row, p->row_bytes, scale, zp);
}"""


def _block(w: Any, struct: str, name: str, step: int, fields: dict) -> str:
    """A named static const parameter block in model.c; returns ``&name``."""
    pname = w.param_name(name, step)
    w.params.append(f"static const {struct} {pname} = {{\n"
                    + _wrap(_fields(fields), "    ", ",", 92) + "\n};")
    return "&" + pname


def _helper(w: Any) -> None:
    """es_tile_window and es_tile_copy, written once into model.c."""
    if not getattr(w, "tile_helper", False):
        w.params.append(_TILE_COPY)
        w.tile_helper = True


def _window(w: Any, name: str, step: int, fields: dict[str, int]) -> str:
    """An es_tile_window block (the helper is written once, before the first)."""
    _helper(w)
    return _block(w, "es_tile_window", name, step, {k: int(v) for k, v in fields.items()})


def _area(win: Win) -> tuple[int, int]:
    return win[1] - win[0], win[3] - win[2]


def copy_in(st: TiledStep, pa: Patch) -> dict[str, int]:
    """es_tile_window of a patch's input window: full input -> buffer 0."""
    e, (h, wd), (r0, r1, c0, c1) = st.elem[0], st.full_hw[0], pa.win[0]
    return {"C": st.channels[0], "rows": r1 - r0, "row_bytes": (c1 - c0) * e,
            "src_off": (r0 * wd + c0) * e, "src_row": wd * e, "src_plane": h * wd * e,
            "dst_off": 0, "dst_row": (c1 - c0) * e, "dst_plane": (r1 - r0) * (c1 - c0) * e}


def copy_out(st: TiledStep, pa: Patch) -> dict[str, int]:
    """es_tile_window of a patch's output: last buffer -> its rows and cols of the output."""
    e, (oh, ow), (r0, r1, c0, c1) = st.elem[-1], st.full_hw[-1], pa.win[-1]
    return {"C": st.channels[-1], "rows": r1 - r0, "row_bytes": (c1 - c0) * e,
            "src_off": 0, "src_row": (c1 - c0) * e, "src_plane": (r1 - r0) * (c1 - c0) * e,
            "dst_off": (r0 * ow + c0) * e, "dst_row": ow * e, "dst_plane": oh * ow * e}


def copy_sub(st: TiledStep, j: int, have: Win, need: Win) -> dict[str, int]:
    """es_tile_window of the part ``need`` of tensor ``j``'s patch buffer (holding
    ``have``) into a contiguous buffer: the skip input of an in-patch Add."""
    e = st.elem[j]
    hh, hw = _area(have)
    nh, nw = _area(need)
    return {"C": st.channels[j], "rows": nh, "row_bytes": nw * e,
            "src_off": ((need[0] - have[0]) * hw + need[2] - have[2]) * e,
            "src_row": hw * e, "src_plane": hh * hw * e,
            "dst_off": 0, "dst_row": nw * e, "dst_plane": nh * nw * e}


def _buf(st: TiledStep, i: int, j: int) -> str:
    return f"({st.ctypes[j]} *)(SCRATCH_{i} + {st.buffers[j][0]})"


def _layer(st: TiledStep, i: int, k: int, pa: Patch, w: Any, shared: dict) -> list[str]:
    """Layer ``k`` on patch ``pa``: its kernel on the patch buffers (after the skip copy
    of an Add that needs one)."""
    layer = st.layers[k]
    call = layer.calls[0]
    idx = {t: j for j, t in enumerate(st.tensors)}
    out_j = idx[layer.outputs[0]]
    bufs = {t: _buf(st, i, idx[t]) for t in (*layer.inputs, layer.outputs[0])}
    lines = []
    if pa.sub[k] is not None:
        pos, need = pa.sub[k]
        j = idx[layer.inputs[pos]]
        win = _window(w, f"{layer.name}_skip{pa.row}_{pa.col}", i,
                      copy_sub(st, j, pa.win[j], need))
        fused = pa.params[k] is not None  # a conv's fused Add: the skip gets its own buffer
        dst = st.skip_buffers[k][0] if fused else st.buffers[out_j][0]
        lines.append(f"es_tile_copy(SCRATCH_{i} + {dst}, SCRATCH_{i} + {st.buffers[j][0]}, "
                     f"{win})")
        bufs[layer.inputs[pos]] = (f"({st.ctypes[j]} *)(SCRATCH_{i} + {dst})" if fused
                                   else bufs[layer.outputs[0]])  # else added in place
    args = []
    for n, a in enumerate(call.args):
        if isinstance(a, Ref) and a.name == "__scratch":
            args.append(f"(void *)(SCRATCH_{i} + {st.kernel_scratch[k][0]})")
        elif isinstance(a, Ref) and a.name in bufs:
            args.append(bufs[a.name])
        elif pa.params[k] is not None and isinstance(a, dict) and n == len(call.args) - 1:
            args.append(_block(w, a["__struct__"], f"{layer.name}_p{pa.row}_{pa.col}", i,
                               pa.params[k]))
        elif pa.params[k] is None and isinstance(a, dict) and a["__struct__"] == "es_bcast":
            shape = [pa.counts[k], *a["shape"][1:]]
            args.append(_block(w, "es_bcast", f"{layer.name}_n{pa.row}_{pa.col}", i,
                               {**a, "shape": shape}))
        elif pa.params[k] is None and isinstance(a, int) and n == _count_arg(call.fn):
            args.append(str(pa.counts[k]))
        elif isinstance(a, dict):
            if (k, n) not in shared:  # the same block on every patch: written once
                shared[(k, n)] = w.arg(a, i, layer.name)
            args.append(shared[(k, n)])
        else:
            args.append(w.arg(a, i, layer.name))
    lines.append(f"{call.fn}(" + f",\n{' ' * (17 + len(call.fn))}".join(args) + ")")
    return lines


def _count_arg(fn: str) -> int:
    from .tiling import ELTWISE_COUNT

    return ELTWISE_COUNT.get(fn, -1)


def checks(st: TiledStep, i: int) -> list[str]:
    """Each conv layer's planned patch scratch against its kernel's macro on every patch."""
    lines = []
    for k, layer in enumerate(st.layers):
        kern = layer.calls[0].kernel
        if kern is None or kern.scratch_c is None or st.patches[0].params[k] is None:
            continue
        for j, expr in enumerate(dict.fromkeys(kern.scratch_c(pa.params[k])
                                               for pa in st.patches)):
            lines.append(f"ES_STATIC_ASSERT(step{i}_tile{k}_{j}, {st.kernel_scratch[k][1]}u >= "
                         f"{expr}); /* {_comment(layer.name)} */")
    return lines


def _quantize_in(st: TiledStep, i: int, pa: Patch, w: Any, base: str) -> str:
    """The first layer (the input's QuantizeLinear) as the copy-in: the float window
    quantized straight into buffer 1; the window's offsets count elements, not bytes."""
    if not getattr(w, "tile_quantize", False):
        _helper(w)
        w.params.append(_TILE_QUANTIZE)
        w.tile_quantize = True
    e = st.elem[0]
    win = {k: v // e if k != "C" and k != "rows" else v for k, v in copy_in(st, pa).items()}
    _, _, n, scale, zp = st.layers[0].calls[0].args
    return (f"        es_tile_quantize(({st.ctypes[1]} *)(SCRATCH_{i} + {st.buffers[1][0]}), "
            f"(const float *){w.names[st.inputs[0]]}, "
            f"{_window(w, base + '_in', i, win)}, {c_float(scale)}, {int(zp)});")


def tiled_case(st: TiledStep, i: int, w: Any) -> str:
    """The ``case i:`` of es_run_step that runs the segment patch by patch."""
    body = [f"    case {i}: /* {_comment(st.name)} ({st.op}): {len(st.layers)} layers on "
            f"{len(st.patches)} patches (tiling.py) */"]
    shared: dict = {}
    for pa in st.patches:
        (r0, r1, c0, c1), (o0, o1, p0, p1) = pa.win[0], pa.win[-1]
        body.append(f"        /* patch ({pa.row}, {pa.col}): input rows [{r0}, {r1}) x cols "
                    f"[{c0}, {c1}) -> output rows [{o0}, {o1}) x cols [{p0}, {p1}) */")
        base = f"{st.layers[0].name}_tile{pa.row}_{pa.col}"
        if st.quantize_in:
            body.append(_quantize_in(st, i, pa, w, base))
        else:
            body.append(f"        es_tile_copy(SCRATCH_{i} + {st.buffers[0][0]}, "
                        f"{w.names[st.inputs[0]]}, "
                        f"{_window(w, base + '_in', i, copy_in(st, pa))});")
        for k in range(1 if st.quantize_in else 0, len(st.layers)):
            body += [f"        {line};" for line in _layer(st, i, k, pa, w, shared)]
        body.append(f"        es_tile_copy({w.names[st.outputs[0]]}, SCRATCH_{i} + "
                    f"{st.buffers[-1][0]}, {_window(w, base + '_out', i, copy_out(st, pa))});")
    w.params.extend(checks(st, i))
    body.append("        break;")
    return "\n".join(body)
