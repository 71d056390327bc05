"""Graph + memory plan -> a self-contained C folder.

Output: ``model.h`` (sizes as #defines, the API), ``model.c`` (the tensor table, one
named #define per buffer, compile-time checks of the planned scratch, the kernel
parameter blocks as named static const structs, one ``case`` per step named after its
ONNX node), ``plan.txt`` (the memory plan drawn as text), ``weights.bin`` or
``weights_data.c``, the runtime sources the model uses (``es_model.c``: the API, the same
for every model), ``bench_main.c`` and a ``Makefile``.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edgesmith import detect_grid
from edgesmith.artifact import write_text_atomic
from edgesmith.errors import ConversionError

from . import weights as wts
from .c_text import _comment, _fields, _wrap, c_float, c_string
from .graph import MAX_BOUND_INPUTS, Call, Graph, Ref, c_ident
from .int8_input import consume_inputs, fold_input_quantize, input_arenas
from .planner import Plan, render_plan
from .threads import DEFAULT_MIN_MACS, Split, prune
from .threads import apply as threads_pass
from .tiling import TiledStep
from .tiling_c import tiled_case
from .tiling_search import apply as tiling_pass

RUNTIME = Path(__file__).parent / "runtime"
CORE_SOURCES = ["edgesmith_rt.h", "es_fp_exact.h", "es_simd.h", "es_lanes.h", "es_act.h",
                "es_act_simd.h", "es_phases_f32.h", "es_quads_i8.h", "es_runtime.c", "es_model.c",
                "es_power.h", "es_power.c", "bench_main.c", "es_detect.h", "es_detect.c"]
# copied, and compiled into the model library, when the profile declares preprocessing
PREPROCESS_SOURCES = ["es_preprocess.h", "es_preprocess.c"]
# the worker pool, when options: {threads: N > 1} (threads.py)
THREADS_SOURCES = ["es_threads.h", "es_threads.c"]


@dataclass
class Generated:
    out_dir: Path
    plan: Plan
    weights_bytes: int  # payload bytes (what the device holds in flash or maps)
    weights_file_bytes: int  # weights.bin on disk, 0 when embedded
    sources: list[str]

    def figures(self) -> dict[str, Any]:
        return {**self.plan.figures(), "weights_bytes": self.weights_bytes,
                "steps": None}


@dataclass(frozen=True)
class PowerDefaults:
    """The profile's ``power:`` block as the generated C takes it: whole microseconds that
    fit the runtime's uint32_t fields, 0 for off, "" for "leave the governor alone"."""

    max_steps: int = 0
    run_us: int = 0
    sleep_us: int = 0
    period_us: int = 0
    governor: str = ""

    @classmethod
    def of(cls, power: Any) -> PowerDefaults:
        """From a ``profiles.schema.Power`` (None = all off), whose schema already refused
        what the C side cannot hold (a wrapped uint32_t, a sleep with no slices)."""
        if power is None:
            return cls()
        return cls(max_steps=power.max_steps or 0, run_us=power.run_us or 0,
                   sleep_us=power.sleep_us, governor=power.governor or "",
                   period_us=round((power.period_ms or 0) * 1000))

    def figures(self) -> dict[str, Any]:
        """What the artifact's metadata records as compiled in."""
        return {"max_steps": self.max_steps, "run_us": self.run_us, "sleep_us": self.sleep_us,
                "period_us": self.period_us, "governor": self.governor or None}


def _power_h(p: PowerDefaults) -> list[str]:
    """model.h's ES_POWER_* block: the defaults es_run_scheduled and edgesmith_bench start
    from; #ifndef so a build can still override one with -D."""
    values = [("ES_POWER_MAX_STEPS", str(p.max_steps), "steps per slice"),
              ("ES_POWER_RUN_US", f"{p.run_us}u", "time budget per slice"),
              ("ES_POWER_SLEEP_US", f"{p.sleep_us}u", "sleep between slices"),
              ("ES_POWER_PERIOD_US", f"{p.period_us}u", "one inference per period"),
              ("ES_POWER_GOVERNOR", c_string(p.governor), "cpufreq governor for the run")]
    lines = ["", "/* the profile's power: block (0 or \"\" = off), see es_power.h */"]
    for macro, value, why in values:
        lines += [f"#ifndef {macro}", f"#define {macro} {value} /* {why} */", "#endif"]
    return lines


def _spec_dict(spec: Any) -> dict[str, Any] | None:
    """The profile's ``preprocess:`` block (a ``profiles.schema.Preprocess`` or its dict)."""
    if spec is None or isinstance(spec, dict):
        return spec
    return spec.model_dump(mode="json")


def _per_channel(values: list[float] | None, default: float) -> str:
    """Three float32 values as C: the spec's per-channel list (one value: all channels),
    rounded to float32 first, as pipeline/preprocess.py holds them."""
    vals = [default] * 3 if not values else list(values) * (3 if len(values) == 1 else 1)
    return "{" + ", ".join(c_float(float(np.float32(v))) for v in vals) + "}"


def _preprocess_h(spec: dict[str, Any] | None) -> list[str]:
    """model.h's ES_PREPROCESS_SPEC: the profile's preprocess: block as an
    es_preprocess_spec initializer, for es_preprocess_u8 (the harness's --frames mode, or
    an application's camera loop); nothing when the profile declares none."""
    if spec is None:
        return []
    rh, rw = spec.get("resize") or (0, 0)
    ch, cw = spec.get("center_crop") or (0, 0)
    dtype = {"float32": "ES_PRE_F32", "uint8": "ES_PRE_U8", "int8": "ES_PRE_I8"}[
        spec.get("dtype") or "float32"]
    fields = [f".resize_h = {rh}, .resize_w = {rw}, /* 0: no resize */",
              f".crop_h = {ch}, .crop_w = {cw}, /* 0: no centre crop */",
              f".mean = {_per_channel(spec.get('mean'), 0.0)},",
              f".std = {_per_channel(spec.get('std'), 1.0)},",
              f".bgr = {int(spec.get('channel_order') == 'bgr')}, "
              f".nhwc = {int(spec.get('layout') == 'nhwc')}, .dtype = {dtype}}}"]
    return ["", "/* the profile's preprocess: block: a camera's HWC uint8 RGB frame -> input 0",
            " * (es_preprocess.h; the arithmetic is pipeline/preprocess.py's, bit for bit):",
            " *   static const es_preprocess_spec pre = ES_PREPROCESS_SPEC;",
            " *   es_preprocess_u8(frame, h, w, &pre, buffer); */",
            '#include "es_preprocess.h"', "#define ES_PREPROCESS 1",
            "#define ES_PREPROCESS_SPEC { \\", *(f"    {f} \\" for f in fields[:-1]),
            f"    {fields[-1]}"]


# kernels that call another kernel file's function: es_conv2d_i8_dot_add's epilogue is
# es_add_i8 (lower/fuse_int8.py); gru_f32.c's projections are es_gemm_f32 (lower/gru.py)
KERNEL_DEPS = {"es_conv2d_i8_dot_add": ("add_int8.c",), "es_gru_f32": ("gemm_f32.c",),
               "es_gru_f32_ref": ("gemm_f32.c",)}


def _kernel_index() -> dict[str, str]:
    """C function name -> kernel source file that defines it."""
    idx = {}
    for f in sorted((RUNTIME / "kernels").glob("*.c")):
        for m in re.finditer(r"^(?:void|int|uint32_t)\s+(es_\w+)\(", f.read_text(), re.M):
            idx[m.group(1)] = f.name
    return idx


def buffer_macro(tensor: str) -> str:
    """The C macro model.c names a tensor's buffer with, before buffer_names makes it unique:
    ``T_`` + the tensor's name (the ONNX value it holds, already a C identifier) without
    leading, trailing or doubled underscores."""
    return "T_" + (re.sub("_+", "_", tensor).strip("_") or "t")


def buffer_names(g: Graph) -> dict[str, str]:
    """Tensor -> its buffer_macro, made unique with a numeric suffix."""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for t in g.tensors:
        base = buffer_macro(t)
        name, k = base, 1
        while name in taken:
            k += 1
            name = f"{base}_{k}"
        taken.add(name)
        names[t] = name
    return names


class _Writer:
    """Renders the calls of the steps: buffers by name, parameter blocks as named
    static const structs with designated initialisers, collected in ``params``."""

    def __init__(self, g: Graph, plan: Plan):
        self.g, self.plan = g, plan
        self.names = buffer_names(g)
        self.params: list[str] = []
        self._pnames: set[str] = set()
        # (step, block text) -> its name: a step that makes one call per row (a dense layer
        # over a ViT's 65 tokens) passes the same block each time, written once
        self._blocks: dict[tuple[str, str], str] = {}

    def ptr(self, r: Ref, step: int) -> str:
        if r.name.startswith("__scratch"):
            # a step that needs none still gets a valid pointer, the arena's start
            return f"(void *)SCRATCH_{step}" if f"__scratch_{step}" in self.plan.offsets \
                else "(void *)A"
        t = self.g.tensors[r.name]
        const = "const " if t.kind == "const" else ""
        cast = f"({const}{t.ctype} *){self.names[r.name]}"
        return f"({cast} + {r.offset})" if r.offset else cast

    def param_name(self, step_name: str, index: int) -> str:
        """P_<node> (P_<node>_<k> for a step's later calls), unique, a C identifier."""
        base = "P_" + (re.sub("_+", "_", c_ident(step_name)).strip("_") or f"step{index}")
        name, k = base, 1
        while name in self._pnames:
            k += 1
            name = f"{base}_{k}"
        self._pnames.add(name)
        return name

    def arg(self, a: Any, step: int, step_name: str) -> str:
        if isinstance(a, Ref):
            return self.ptr(a, step)
        if isinstance(a, dict):
            body = _wrap(_fields(a), "    ", ",", 92)
            key = (step_name, f"{a['__struct__']} {body}")
            if key not in self._blocks:
                pname = self._blocks[key] = self.param_name(step_name, step)
                self.params.append(f"static const {a['__struct__']} {pname} = {{\n"
                                   + body + "\n};")
            return "&" + self._blocks[key]
        if isinstance(a, bool):
            return str(int(a))
        if isinstance(a, (int, np.integer)):
            return str(int(a))
        if isinstance(a, (float, np.floating)):
            return c_float(a)
        if isinstance(a, str):
            return a
        raise ConversionError(f"cannot render argument {a!r} of a call in step {step_name!r}",
                              where=step_name, fix="report a bug: a lowering made a call "
                                                   "argument codegen does not know")

    def call(self, c: Call, step: int, step_name: str) -> str:
        """``fn(args)`` on one line, or one argument a line aligned under the first."""
        args = [self.arg(a, step, step_name) for a in c.args]
        one = f"{c.fn}({', '.join(args)})"
        if len(one) <= 88:
            return one
        return f"{c.fn}(" + f",\n{' ' * (9 + len(c.fn))}".join(args) + ")"


def _model_h(g: Graph, plan: Plan, wl: wts.WeightsLayout, embedded: bool, name: str,
             power: PowerDefaults, preprocess: dict[str, Any] | None = None,
             threads: int = 1) -> str:
    lines = [
        f"/* Generated by edgesmith for model {name!r} ({g.precision}). Do not edit. */",
        "#ifndef ES_MODEL_H", "#define ES_MODEL_H", "", '#include "edgesmith_rt.h"', "",
        "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
        f"#define ES_MODEL_NAME {c_string(name)}",
        f"#define ES_MODEL_ID 0x{g.model_id:08x}u",
        f"#define ES_PRECISION {c_string(g.precision)}",
        f"#define ES_ARENA_BYTES {max(plan.arena_bytes, plan.alignment)}u",
        f"#define ES_ARENA_ALIGN {plan.alignment}u",
        f"#define ES_ARENA_LOWER_BOUND {plan.lower_bound_bytes}u",
        f"#define ES_WEIGHTS_BYTES {len(wl.payload)}u",
        f"#define ES_WEIGHTS_COUNT {wl.count}u",
        f"#define ES_WEIGHTS_EMBEDDED {int(embedded)}",
        f"#define ES_NUM_STEPS {len(g.steps)}",
        f"#define ES_NUM_INPUTS {len(g.inputs)}",
        f"#define ES_NUM_OUTPUTS {len(g.outputs)}",
        f"#define ES_THREADS {threads} /* options: threads; > 1: es_init starts a pool */",
    ]
    lines.append("#define ES_MAX_INPUT_BYTES "
                 f"{max([g.tensors[n].nbytes for n in g.inputs] + [1])}u")
    for kind, names in (("INPUT", g.inputs), ("OUTPUT", g.outputs)):
        for i, n in enumerate(names):
            t = g.tensors[n]
            lines.append(f"#define ES_{kind}{i}_ELEMS {t.size}u")
            lines.append(f"#define ES_{kind}{i}_BYTES {t.nbytes}u")
            lines.append(f"/* {kind.lower()} {i}: {t.ctype} {list(t.shape)} */")
            if kind == "INPUT" and n in plan.consumed:  # int8_input.py: float_in_place
                lines += [f"/* input {i} is consumed by a run: its int8 copy is written over "
                          "its arena slot, so copy it in again (es_input, es_input_ptr) "
                          "before each run, or bind it (es_bind_input) */",
                          f"#define ES_INPUT{i}_CONSUMED 1"]
            if kind == "INPUT" and t.dtype == "i8" and t.scale is not None:  # int8_input.py
                lines += [f"#define ES_INPUT{i}_SCALE {c_float(float(t.scale[0]))}",
                          f"#define ES_INPUT{i}_ZERO_POINT {t.zero_point}"]
    return "\n".join(lines + _power_h(power) + _preprocess_h(preprocess) + _detect_h(g)
                     + _API_H)


def _detect_h(g: Graph, max_boxes: int = 100) -> list[str]:
    """es_detect.c's sizes, when the outputs are an anchor-free detection head (see
    es_detect.h) over a (1, C, H, W) input: every output a float (1, 5 + K, h, w) map at a
    whole stride, or one float (1, 5 + K, cells) output packing such maps finest first
    (pipeline/packing.py: strides s, 2s, 4s... whose cells sum to the packed count)."""
    ins = g.tensors[g.inputs[0]].shape if len(g.inputs) == 1 else ()
    shapes = [g.tensors[n].shape for n in g.outputs]
    if len(ins) != 4 or not shapes or any(g.tensors[n].dtype != "f32" for n in g.outputs) \
            or any(len(s) < 2 or s[0] != 1 or s[1] != shapes[0][1] for s in shapes) \
            or shapes[0][1] < 6:
        return []
    packed = len(shapes) == 1 and len(shapes[0]) == 3
    grids = (detect_grid.packed_grids(ins[2:], shapes[0][2]) if packed
             else detect_grid.map_grids(ins[2:], shapes))
    if not grids:
        return []
    lists = {key: "{" + ", ".join(str(v) for v in vals) + "}" for key, vals in (
        ("STRIDES", [s for s, _, _ in grids]), ("HEIGHTS", [h for _, h, _ in grids]),
        ("WIDTHS", [w for _, _, w in grids]))}
    cells = sum(h * w for _, h, w in grids)
    offsets = np.cumsum([0] + [h * w for _, h, w in grids[:-1]]).tolist()
    layout = ([f"/* detection head (es_detect.h): one (4 + 1 + K) x {cells} output packing "
               "the levels' maps finest first */", "#define ES_DETECT_PACKED 1",
               f"#define ES_DETECT_CHANNEL_STRIDE {cells}",
               "#define ES_DETECT_OFFSETS {" + ", ".join(map(str, offsets)) + "}"]
              if packed else
              ["/* detection head (es_detect.h): one (4 + 1 + K) x H x W map per stride */"])
    return ["", *layout,
            f"#define ES_DETECT_LEVELS {len(grids)}",
            f"#define ES_DETECT_CLASSES {shapes[0][1] - 5}",
            *(f"#define ES_DETECT_{k} {v}" for k, v in lists.items()),
            f"#define ES_DETECT_MAX_CANDIDATES {cells}",
            "#ifndef ES_DETECT_MAX_BOXES", f"#define ES_DETECT_MAX_BOXES {max_boxes}", "#endif"]


_API_H = [
    "", "typedef struct {", "    const char *name;", "    uint32_t offset, bytes;",
    "    int is_weight;", "} es_tensor_info;", "",
    "extern const es_tensor_info es_tensors[]; /* the memory plan, as data */",
    "extern const int es_num_tensors;",
    "extern const uint32_t es_input_bytes[], es_output_bytes[];",
    "extern const char *const es_step_names[];  /* ONNX node per step */",
    "extern const char *const es_step_ops[];", "",
    "/* weights_path: weights.bin (NULL = \"weights.bin\"); ignored when embedded. */",
    "int es_init(es_model *m, void *arena, size_t arena_size, const char *weights_path);",
    "void es_deinit(es_model *m);",
    "int es_input(es_model *m, int index, const void *data, size_t nbytes);",
    "void *es_input_ptr(es_model *m, int index);",
    "/* Read input index from data itself on every run, no copy, until es_input or",
    " * es_input_ptr: es_input_bytes[index] bytes, aligned to ES_ARENA_ALIGN, kept valid and",
    " * unchanged while a run reads them; the model never writes them. ES_ERR_UNAVAILABLE for",
    " * an input that is also an output (its output is its arena slot) or past the first",
    " * ES_MAX_BOUND_INPUTS. */",
    "int es_bind_input(es_model *m, int index, const void *data, size_t nbytes);",
    "/* Run the model. ES_ERR_INPUT_SPENT: an input a run consumes (ES_INPUT<i>_CONSUMED)",
    " * was neither copied in (es_input, es_input_ptr) since the last run nor bound. */",
    "int es_run(es_model *m, const es_hooks *hooks);",
    "/* Run at most max_steps steps; ES_MORE while steps remain, ES_OK when done. */",
    "int es_run_slice(es_model *m, int max_steps, const es_hooks *hooks);",
    "int es_output(const es_model *m, int index, void *data, size_t nbytes);",
    "const void *es_output_ptr(const es_model *m, int index);", "",
    "/* between model.c and es_model.c: where inputs and outputs live in the arena, and",
    " * one step of the model (es_run and es_run_slice call it; not for applications) */",
    "extern const uint32_t es_input_offsets[], es_output_offsets[];",
    "extern const unsigned char es_input_bindable[]; /* es_bind_input may bind it */",
    "extern const unsigned char es_input_consumed[]; /* a run overwrites its arena slot */",
    "void es_run_step(es_model *m, int index);",
    "", "#ifdef __cplusplus", "}", "#endif", "#endif /* ES_MODEL_H */", ""]


def _c_list(items: list[str], empty: str) -> str:
    return "\n".join(f"    {x}," for x in items) or f"    {empty},"


def _plan_tables(g: Graph, plan: Plan, wl: wts.WeightsLayout) -> str:
    """The memory plan and the step names as data (es_tensors, offsets, byte counts)."""
    tinfo = [f"{{{c_string(t.name)}, {wl.offsets[t.name]}u, {t.nbytes}u, 1}}"
             if t.kind == "const" else
             f"{{{c_string(t.name)}, {plan.offsets[t.name]}u, {t.nbytes}u, 0}}"
             for t in g.tensors.values()]
    ins = ", ".join(str(plan.offsets[n]) + "u" for n in g.inputs) or "0u"
    outs = ", ".join(str(plan.offsets[n]) + "u" for n in g.outputs) or "0u"
    bind = ", ".join(str(int(_bindable(g, i))) for i in range(len(g.inputs))) or "0"
    spent = ", ".join(str(int(n in plan.consumed)) for n in g.inputs) or "0"
    in_b = ", ".join(f"ES_INPUT{i}_BYTES" for i in range(len(g.inputs))) or "0u"
    out_b = ", ".join(f"ES_OUTPUT{i}_BYTES" for i in range(len(g.outputs))) or "0u"
    return f"""/* ---- memory plan: {len(g.tensors)} tensors; arena {plan.arena_bytes} B
 *      (liveness lower bound {plan.lower_bound_bytes} B, naive {plan.naive_bytes} B,
 *       {plan.strategy}); drawn in plan.txt ---- */
const es_tensor_info es_tensors[] = {{
{_c_list(tinfo, '{"", 0u, 0u, 0}')}
}};
const int es_num_tensors = (int)(sizeof es_tensors / sizeof es_tensors[0]);

const uint32_t es_input_offsets[] = {{{ins}}};
const unsigned char es_input_bindable[] = {{{bind}}};
const unsigned char es_input_consumed[] = {{{spent}}};
const uint32_t es_output_offsets[] = {{{outs}}};
const uint32_t es_input_bytes[] = {{{in_b}}};
const uint32_t es_output_bytes[] = {{{out_b}}};

const char *const es_step_names[] = {{
{_c_list([c_string(st.name) for st in g.steps], '""')}
}};
const char *const es_step_ops[] = {{
{_c_list([c_string(st.op) for st in g.steps], '""')}
}};
"""


def _bindable(g: Graph, i: int) -> bool:
    """Whether es_bind_input may bind input ``i``: the steps then read it through
    m->input[i]. Not an input that is also an output (es_output reads its arena slot) nor
    one past the ES_MAX_BOUND_INPUTS pointers the model object holds."""
    return i < MAX_BOUND_INPUTS and g.inputs[i] not in g.outputs


def _buffer_defines(g: Graph, plan: Plan, wl: wts.WeightsLayout, names: dict[str, str]) -> str:
    """One #define per buffer: activations at their arena offset (A), constants at their
    weights offset (W), each step's scratch; used only inside es_run_step. A bindable input
    is read through m->input[i] (its arena slot, or the caller's buffer: es_bind_input)."""
    lines = ["/* ---- buffers: activations and scratch in the arena A, constants in the "
             "weights W ---- */"]
    bound = {n: i for i, n in enumerate(g.inputs) if _bindable(g, i)}
    for t in g.tensors.values():
        base, off = ("W", wl.offsets[t.name]) if t.kind == "const" else ("A",
                                                                         plan.offsets[t.name])
        if t.name in bound:
            lines.append(f"#define {names[t.name]} ((unsigned char *)m->input[{bound[t.name]}])"
                         f" /* {t.ctype} {list(t.shape)}, {t.nbytes} B at A + {off}, or bound */")
            continue
        lines.append(f"#define {names[t.name]} ({base} + {off}) "
                     f"/* {t.ctype} {list(t.shape)}, {t.nbytes} B */")
    for i, st in enumerate(g.steps):
        if f"__scratch_{i}" in plan.offsets:
            lines.append(f"#define SCRATCH_{i} (A + {plan.offsets[f'__scratch_{i}']}) "
                         f"/* {st.scratch} B for {_comment(st.name)} */")
    return "\n".join(lines)


def scratch_checks(g: Graph, splits: dict[int, Split] | None = None) -> list[str]:
    """ES_STATIC_ASSERT lines: each step's planned scratch is at least what its kernel's
    macro in edgesmith_rt.h says it needs, so the build fails where they drift apart (a
    step split over threads: each task's region against its slice's macro)."""
    lines = []
    for i, st in enumerate(g.steps):
        if splits and id(st) in splits:
            lines += [f"ES_STATIC_ASSERT(step{i}_task{k}_scratch, {splits[id(st)].stride}u >= "
                      f"{expr}); /* {_comment(st.name)}, thread {k} */"
                      for k, expr in enumerate(splits[id(st)].scratch_c)]
            continue
        exprs = dict.fromkeys(c.kernel.scratch_c(c.args[-1]) for c in st.calls
                              if c.kernel is not None and c.kernel.scratch_c is not None)
        for k, expr in enumerate(exprs):
            lines.append(f"ES_STATIC_ASSERT(step{i}_scratch{'_' + str(k) if k else ''}, "
                         f"{st.scratch}u >= {expr}); /* {_comment(st.name)} */")
    return lines


def _run_step(g: Graph, w: _Writer, splits: dict[int, Split] | None = None) -> str:
    cases = []
    for i, st in enumerate(g.steps):
        if isinstance(st, TiledStep):
            cases.append(_tiled_case(st, i, w))
            continue
        if splits and id(st) in splits:
            cases.append(_parallel_case(st, i, w, splits[id(st)]))
            continue
        body = [f"    case {i}: /* {_comment(st.name)} ({st.op}) */"]
        body += [f"        {w.call(c, i, st.name)};" for c in st.calls]
        body.append("        break;")
        cases.append("\n".join(body))
    return f"""void es_run_step(es_model *m, int i) {{
    unsigned char *A = m->arena;
    const unsigned char *W = m->weights.payload;
    (void)A;
    (void)W;
    switch (i) {{
{chr(10).join(cases)}
    default:
        break;
    }}
}}
"""


# -- steps split over threads (threads.py) -----------------------------------------------------
def _parallel_case(st: Any, i: int, w: _Writer, split: Split) -> str:
    """The step as ``es_parallel_for`` over its slices: a task function (written with the
    parameter blocks, before es_run_step) runs slice k's call with its own scratch."""
    fn = f"es_task_{i}"
    body = [f"/* {_comment(st.name)} ({st.op}): output channels split over "
            f"{len(split.calls)} threads, one call of the unchanged kernel each */",
            f"static void {fn}(void *ctx, int k) {{",
            "    es_model *m = (es_model *)ctx;", "    unsigned char *A = m->arena;",
            "    const unsigned char *W = m->weights.payload;", "    (void)A;", "    (void)W;",
            "    switch (k) {"]
    for k, (c, (lo, hi)) in enumerate(zip(split.calls, split.ranges, strict=True)):
        # a slice that needs no scratch (e.g. a 1x1 conv reading quad planes) gets the
        # arena's start, as a whole step does
        scratch = f"(void *)(SCRATCH_{i} + {k * split.stride})" if split.stride else "(void *)A"
        c = type(c)(c.fn, [scratch if getattr(a, "name", "") == "__scratch" else a
                           for a in c.args], c.kernel)
        call = w.call(c, i, f"{st.name}_t{k}").replace("\n", "\n" + " " * 4)
        body += [f"    case {k}: /* channels [{lo}, {hi}) */", f"        {call};",
                 "        break;"]
    body += ["    default:", "        break;", "    }", "}"]
    w.params.append("\n".join(body))
    return (f"    case {i}: /* {_comment(st.name)} ({st.op}) on {len(split.calls)} threads */\n"
            f"        es_parallel_for((es_pool *)m->pool, {len(split.calls)}, {fn}, m);\n"
            "        break;")


# -- patch-based execution of the network's first layers (tiling.py) --------------------------
def _tiled_case(st: TiledStep, i: int, w: _Writer) -> str:
    """A tiled segment's case of es_run_step: tiling_c.py writes it."""
    return tiled_case(st, i, w)


def _model_c(g: Graph, plan: Plan, wl: wts.WeightsLayout, name: str,
             splits: dict[int, Split] | None = None) -> str:
    w = _Writer(g, plan)
    run_step = _run_step(g, w, splits)  # fills w.params
    checks = scratch_checks(g, splits)
    return "\n".join([
        f"/* Generated by edgesmith for model {_comment(repr(name))} ({g.precision}). One case",
        " * per step, named after its ONNX node; buffers are named after their ONNX values.",
        " * The API (es_init, es_run, ...) is es_model.c, the same for every model. */",
        '#include "model.h"', *(['#include "es_threads.h"'] if splits else []), "",
        _plan_tables(g, plan, wl),
        _buffer_defines(g, plan, wl, w.names), "",
        "/* ---- scratch checks: each planned scratch against its kernel's macro ---- */",
        *(checks or ["/* no step needs scratch */"]), "",
        "/* ---- kernel parameters ---- */", *w.params, "", run_step])


def _makefile(sources: list[str], cc: str, cflags: str, ldflags: str,
              threads: int = 1) -> str:
    lib = " ".join(s for s in sources if s.endswith(".c") and s != "bench_main.c")
    pthread = " -pthread" if threads > 1 else ""  # es_threads.c's pool
    return f"""# Generated by edgesmith. `make`: edgesmith_bench; `make lib`: the model library.
CC = {cc}
CFLAGS = {cflags} -std=c99 -Wall -Wextra -Werror
LDFLAGS = {ldflags}{pthread}
LDLIBS = -lm{pthread}
SRCS = {lib}
OBJS = $(SRCS:.c=.o)

all: edgesmith_bench

edgesmith_bench: $(OBJS) bench_main.o
\t$(CC) $(CFLAGS) -o $@ $(OBJS) bench_main.o $(LDFLAGS) $(LDLIBS)

lib: libedgesmith_model.a

libedgesmith_model.a: $(OBJS)
\t$(AR) rcs $@ $(OBJS)

%.o: %.c
\t$(CC) $(CFLAGS) -c -o $@ $<

clean:
\trm -f $(OBJS) bench_main.o edgesmith_bench libedgesmith_model.a

.PHONY: all lib clean
"""


def generate(g: Graph, plan: Plan, out_dir: Path, *, embedded: bool = False, cc: str = "cc",
             cflags: str = "-O2", ldflags: str = "", name: str = "model",
             power: PowerDefaults | None = None, preprocess: Any = None, threads: int = 1,
             splits: dict[int, Split] | None = None) -> Generated:
    """The C folder for ``g``; ``preprocess`` (the profile's block) adds es_preprocess.c
    to the library and ES_PREPROCESS_SPEC to model.h; ``threads`` > 1 the worker pool,
    which the steps in ``splits`` (threads.apply, before the plan) run on."""
    out_dir = Path(out_dir)
    preprocess = _spec_dict(preprocess)
    splits = splits if threads > 1 else None
    prune(g, splits or {})
    (out_dir / "kernels").mkdir(parents=True, exist_ok=True)
    wl = wts.layout(g)
    idx = _kernel_index()
    fns = {c.fn for st in g.steps for c in st.calls}
    missing = sorted(f for f in fns if f not in idx and f not in ("es_copy",))
    if missing:
        raise ConversionError(f"no kernel source in {RUNTIME / 'kernels'} defines {missing}",
                              where=", ".join(missing),
                              fix="report a bug: a lowering calls a kernel the runtime lacks")
    kernels = sorted({idx[f] for f in fns if f in idx} | {"copy.c"}
                     | {d for f in fns for d in KERNEL_DEPS.get(f, ())})
    for f in CORE_SOURCES + (PREPROCESS_SOURCES if preprocess is not None else []) + (
            THREADS_SOURCES if threads > 1 else []):
        shutil.copyfile(RUNTIME / f, out_dir / f)
    for f in kernels:
        shutil.copyfile(RUNTIME / "kernels" / f, out_dir / "kernels" / f)
    sources = ["model.c", "es_model.c", "es_runtime.c", "es_power.c", "es_detect.c",
               *(f"kernels/{k}" for k in kernels)]
    if preprocess is not None:
        sources.append("es_preprocess.c")
    if threads > 1:
        sources.append("es_threads.c")
    file_bytes = 0
    if embedded:
        write_text_atomic(out_dir / "weights_data.c", wts.embedded_c(wl))
        sources.append("weights_data.c")
    else:
        file_bytes = wts.write(out_dir / "weights.bin", wl, g.model_id)
    write_text_atomic(out_dir / "model.h", _model_h(g, plan, wl, embedded, name,
                                                        power or PowerDefaults(), preprocess,
                                                        threads))
    write_text_atomic(out_dir / "model.c", _model_c(g, plan, wl, name, splits))
    write_text_atomic(out_dir / "plan.txt", render_plan(plan, g))
    # the same plan's figures (and tiling) as data, for `edgesmith plan --json`
    write_text_atomic(out_dir / "plan.json", json.dumps(plan.figures(), indent=1) + "\n")
    write_text_atomic(out_dir / "Makefile", _makefile(sources + ["bench_main.c"], cc, cflags,
                                                      ldflags, threads))
    return Generated(out_dir, plan, len(wl.payload), file_bytes, sources + ["bench_main.c"])


def from_onnx(onnx_path: Path, out_dir: Path, *, precision: str = "fp32", embedded: bool = False,
              cc: str = "cc", cflags: str = "-O2", ldflags: str = "", alignment: int = 64,
              name: str | None = None, deploy_cc: str | None = None,
              deploy_cflags: str | None = None, requant: str = "fp32",
              power: PowerDefaults | None = None, preprocess: Any = None,
              tiling: Any = None, arena_budget: int | None = None, threads: int = 1,
              split_min_macs: int | None = None, input: str = "float") -> Generated:
    """Lower, plan and generate in one call. Kernels are picked for ``deploy_cc`` /
    ``deploy_cflags`` (the device's compiler, when it is not ``cc``); ``requant`` is
    ir.lower's; ``power`` becomes model.h's ES_POWER_* defaults, ``preprocess`` (the
    profile's block) its ES_PREPROCESS_SPEC; ``threads`` > 1 splits the heavy steps of at
    least ``split_min_macs`` MACs (threads.py's default when None) over a worker pool;
    ``input`` "int8": the model takes its input quantized, "float_in_place": a run
    quantizes its float input over the input's own arena slot (int8_input.py)."""
    from .ir import lower
    from .isa import macros
    from .planner import plan as make_plan

    g = lower(onnx_path, precision, macros(deploy_cc or cc, deploy_cflags if deploy_cc
                                           else cflags), requant)
    if input == "int8":  # the caller passes the quantized input (int8_input.py)
        g = fold_input_quantize(g)
    elif input == "float_in_place":  # its int8 copy goes over the input's slot
        g = consume_inputs(g)
    splits = threads_pass(g, threads, DEFAULT_MIN_MACS if split_min_macs is None
                          else split_min_macs)  # before the plan: scratch per thread
    p = make_plan(g, alignment=alignment)
    # what C option input would save, told in plan.txt and a budget miss (one thread:
    # threads_pass left g as lowered)
    arenas = input_arenas(g, p.arena_bytes, lambda h: make_plan(h, alignment=alignment)
                          .arena_bytes) if input == "float" and threads <= 1 else {}
    # patch-based execution of the leading conv chain, when forced or the budget needs it
    g, p = tiling_pass(g, p, tiling, arena_budget, alignment)
    p.input_arenas = arenas
    return generate(g, p, out_dir, embedded=embedded, cc=cc, cflags=cflags, ldflags=ldflags,
                    name=name or Path(onnx_path).stem, power=power, preprocess=preprocess,
                    threads=threads, splits=splits)
