"""The one module that touches TVM's moving internals.

TVM 0.27 renamed much of its Python API (``tir`` -> ``tirx``/``s_tir``, ``nd.array`` ->
``runtime.tensor``, ...). Everything else in tvm-ext reaches TVM through here, so the next
rename is a one-file change.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

import psutil

# TVM's runtime sizes its thread pool once, when the first parallel kernel runs, from
# TVM_NUM_THREADS or else half the hardware threads on x86 (it assumes SMT): 1 thread on a
# 2-core machine without SMT. `runtime.config_threadpool` can lower the count later but never
# raise it above the size fixed at creation. So before anything can create the pool we raise
# its ceiling to the logical CPU count; `threads(n)` then picks the count per measurement.
# A user's own TVM_NUM_THREADS wins.
os.environ.setdefault("TVM_NUM_THREADS", str(os.cpu_count() or 1))

import importlib
import sys
import types

import numpy as np  # noqa: E402
import tvm  # noqa: E402  (must follow the environment set-up above)
import tvm.s_tir  # noqa: E402,F401
import tvm.tirx  # noqa: E402,F401
import tvm_ffi  # noqa: E402,F401
from tvm import ir, relax, runtime, s_tir, te, tirx, transform  # noqa: E402,F401
from tvm.relax.expr_functor import PyExprMutator, PyExprVisitor, mutator, visitor
from tvm.relax.frontend import nn as relax_nn  # noqa: E402,F401  (models)
from tvm.s_tir import dlight  # noqa: E402,F401  (its IR analysis, for our rules)
from tvm.s_tir import meta_schedule as ms  # noqa: E402,F401
from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock
from tvm.script import tirx as T  # noqa: E402,F401  (TVMScript, for kernels and intrinsics)
from tvm.support.popen_pool import PopenPoolExecutor  # noqa: E402,F401
from tvm.support.tar import tar  # noqa: E402,F401

from tvm_ext.base.errors import ThreadConfigError  # noqa: E402

# The TVM names the rest of the package uses, under their TVM 0.27 homes.
TVM_VERSION = tvm.__version__
Schedule = tvm.s_tir.Schedule
ScheduleError = tvm.s_tir.schedule.ScheduleError
# A check inside TVM that failed (a primitive given IR its author did not foresee).
InternalError = tvm.error.InternalError
TensorIntrin = tvm.s_tir.TensorIntrin
PrimFunc = tvm.tirx.PrimFunc
IRModule = tvm.IRModule
Target = tvm.target.Target
derived_object = tvm.ir.utils.derived_object  # for Python subclasses of MetaSchedule's classes
cpu = tvm.cpu
cuda = tvm.cuda


def global_func(name: str):
    """Return TVM's registered global function ``name`` (raises if TVM lacks it)."""
    return tvm.get_global_func(name)


def physical_cores() -> int:
    """Physical cores of this machine (hyper-threads share one core's FMA units)."""
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def runtime_threads() -> int:
    """Threads TVM's runtime pool uses now."""
    return int(global_func("runtime.NumThreads")())


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Run the body with TVM's CPU thread pool set to ``n`` threads, then restore it."""
    before = runtime_threads()
    configure = global_func("runtime.config_threadpool")
    configure(0, int(n))
    got = runtime_threads()
    if got != n:
        configure(0, before)
        raise ThreadConfigError(
            f"TVM's runtime thread pool runs {got} threads, the target asks for {n}. The pool was "
            f"created before tvm_ext raised its ceiling (TVM_NUM_THREADS="
            f"{os.environ.get('TVM_NUM_THREADS')}); import tvm_ext before running any TVM kernel, "
            f"or set TVM_NUM_THREADS>={n}."
        )
    try:
        yield
    finally:
        configure(0, before)


def as_module(obj) -> "tvm.IRModule":
    """Return the IRModule of a ``Schedule``, ``IRModule`` or ``PrimFunc``."""
    if isinstance(obj, Schedule):
        return obj.mod
    if isinstance(obj, tvm.IRModule):
        return obj
    if isinstance(obj, PrimFunc):
        return tvm.IRModule({"main": obj.with_attr("global_symbol", "main")})
    raise TypeError(
        "expected a tvm.s_tir.Schedule, tvm.IRModule or tvm.tirx.PrimFunc, got "
        f"{type(obj).__name__}"
    )


def main_func(mod: "tvm.IRModule") -> PrimFunc:
    """Return the single PrimFunc of ``mod`` (the kernel to run)."""
    funcs = [f for f in mod.functions.values() if isinstance(f, PrimFunc)]
    if len(funcs) != 1:
        names = [gv.name_hint for gv in mod.functions.keys()]
        raise ValueError(f"expected a module with exactly one PrimFunc, got {len(funcs)}: {names}")
    return funcs[0]


def param_specs(func: PrimFunc) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype) of each tensor parameter of ``func``, in order."""
    specs = []
    for p in func.params:
        # TVM 0.27: a tensor parameter is a Var that carries its own shape and dtype.
        shape = getattr(p, "shape", None)
        if shape is None:
            raise ValueError(f"parameter {p} of the kernel is not a tensor")
        try:
            dims = tuple(int(d) for d in shape)
        except TypeError as err:
            raise ValueError(f"parameter {p} has a symbolic shape {list(shape)}") from err
        specs.append((dims, str(p.dtype)))
    return specs


def called_prim_funcs(func) -> list[str]:
    """Names of the PrimFuncs a Relax function calls with ``call_tir``, once per call site."""

    call_tir = tvm.ir.Op.get("relax.call_tir")
    names: list[str] = []

    @visitor
    class _Calls(PyExprVisitor):
        def visit_call_(self, call) -> None:
            if call.op.same_as(call_tir):
                names.append(call.args[0].name_hint)
            super().visit_call_(call)

    _Calls().visit_expr(func)
    return names


def deep_copy(mod: "tvm.IRModule") -> "tvm.IRModule":
    """An independent copy of ``mod`` (a trace replayed onto a module that an earlier replay
    still references crashes TVM 0.27)."""
    return tvm.ir.load_json(tvm.ir.save_json(mod))


def tensor(array, device):
    """A TVM runtime tensor holding a copy of numpy ``array`` on ``device``."""
    return tvm.runtime.tensor(array, device)


def shared_tensors(shape: tuple[int, ...], dtype: str) -> tuple[np.ndarray, list]:
    """A new CPU tensor of ``shape`` as numpy sees it, and each of its leading-axis parts as
    a TVM tensor of its own (no copy: both views of the same memory; each part starts where
    its data does, as a kernel wants its arguments, not at an offset into the whole)."""
    whole = np.from_dlpack(tvm.runtime.empty(shape, dtype, tvm.cpu(0)))
    return whole, [tvm.runtime.from_dlpack(part) for part in whole]


def prefix_view(tensor, shape: tuple[int, ...], dtype: str):
    """A view of the first elements of ``tensor`` (TVM) as ``shape``, no copy."""
    return tensor._create_view(shape, dtype)


def build(mod: "tvm.IRModule", target: "tvm.target.Target"):
    """Compile a TIR module for ``target``; returns the runtime module."""
    return tvm.tirx.build(mod, target=target)


def meta_schedule(target_kind: str = "llvm"):
    """``tvm.s_tir.meta_schedule``, ready to make a tuning context without paying for every
    tensor intrinsic TVM has. Called when a tuning context is about to be made, never at import.

    MetaSchedule imports ``tvm.s_tir.tensor_intrin`` (registering ~500 intrinsics, 19-43 s
    here) when a tuning context is made. The package is entered in ``sys.modules`` as a plain
    namespace over TVM's own files; only CUDA targets import a submodule (the WMMA/MMA
    intrinsics its stock rules use); CPU tuning uses a rule set without intrinsic rules
    (tvm_ext.kernel_tuner.space.design_space). TVM's files are not changed;
    ``import tvm.s_tir.tensor_intrin.x86`` still works afterwards.
    """

    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        package = types.ModuleType(name, "tensor intrinsics, loaded per ISA by tvm_ext")
        package.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
        sys.modules[name] = package
        tvm.s_tir.tensor_intrin = package
    if target_kind == "cuda":
        importlib.import_module(f"{name}.cuda")

    return ms


def stock_intrinsics(target_kind: str = "llvm") -> None:
    """Register the tensor intrinsics stock MetaSchedule's default rules name for a target
    kind (x86: VNNI/AVX512 dot products; cuda: WMMA/MMA), after :func:`meta_schedule` (whose
    stand-in package leaves them unregistered): for a stock ``tune_relax``/``tune_tir``."""

    meta_schedule(target_kind)
    importlib.import_module(
        "tvm.s_tir.tensor_intrin." + ("cuda" if target_kind == "cuda" else "x86")
    )


def sblocks(func) -> Iterator["s_tir.SBlock"]:
    """Every block of ``func`` (the root first), in program order."""
    stack = [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, s_tir.SBlock):
            yield node
        children = []
        for name in ("block", "body", "then_case", "else_case", "init"):
            child = getattr(node, name, None)
            if isinstance(child, (tirx.stmt.Stmt,)):
                children.append(child)
        if isinstance(node, tirx.SeqStmt):
            children.extend(node.seq)
        stack.extend(reversed(children))


def without_weight_repack(mod):
    """``mod`` without its weight-repacking blocks (those annotated
    ``meta_schedule.layout_rewrite_preproc``: MetaSchedule's RewriteLayout and our contraction
    rule mark them so), each repacked weight becoming a parameter in its packed layout: the
    function as a compiled model runs it, its weights repacked once at compile time. A module
    without such blocks comes back unchanged."""

    return RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)


def build_for_tuning(mod, target, _params=None):
    """MetaSchedule's default build (weights taken as repacked: :func:`without_weight_repack`)
    without importing every tensor intrinsic in the worker (the stock one does, in every fresh
    builder process: 19-43 s each)."""
    return tvm.tirx.build(without_weight_repack(mod), target=target)


def _llvm_source(lib, fmt: str) -> str:
    for module in (lib, *getattr(lib, "imports", ())):
        if getattr(module, "kind", None) == "llvm" or module is lib:
            try:
                text = module.inspect_source(fmt)
            except (RuntimeError, AttributeError, TypeError):  # not an LLVM module: try the next
                continue
            if text:
                return text
    raise ValueError(f"no LLVM {fmt} in the built module (kind {getattr(lib, 'kind', '?')})")


def assembly(lib) -> str:
    """The x86 assembly LLVM prints for a built CPU module (``inspect_source("asm")`` of the
    module or, for a wrapper, of the first imported module that has it)."""
    return _llvm_source(lib, "asm")


def llvm_ir(lib) -> str:
    """The optimized LLVM IR of a built CPU module (``inspect_source("ll")``: the module after
    LLVM's optimization pipeline, the IR instruction selection reads)."""
    return _llvm_source(lib, "ll")


def set_runner_threads(n: int) -> None:
    """Popen-worker initializer: the runner's kernels use ``n`` threads (the target's cores)."""
    os.environ["TVM_NUM_THREADS"] = str(n)


def json_of_target(target) -> str:
    """A target as the JSON its constructor accepts back (``Target(json.loads(s))``)."""
    return str(target)


@contextmanager
def no_notebook_tables() -> Iterator[None]:
    """Inside a notebook MetaSchedule displays its per-batch tables in the cell output,
    bypassing logging; within this block it logs them (to the tune's log file) instead."""
    name = "s_tir.meta_schedule.using_ipython"
    original = tvm.get_global_func(name, allow_missing=True)
    tvm_ffi.register_global_func(name, lambda: False, override=True)
    try:
        yield
    finally:
        if original is not None:
            tvm_ffi.register_global_func(name, original, override=True)


def relax_params(func) -> list[tuple[str, tuple[int | str | None, ...], str]]:
    """(name, shape, dtype) of each parameter of a Relax function (TVM 0.27: a parameter's
    type is ``var.ty``, formerly ``struct_info``). A symbolic dimension is its variable's name
    (``"seq"``: two inputs that name one variable take one length), or None when it is an
    expression of variables."""
    out = []
    for var in func.params:
        ty = var.ty
        shape = getattr(ty, "shape", None)
        values = getattr(shape, "values", None) or ()
        dims = tuple(_dim(d) for d in values)
        out.append((str(var.name), dims, str(getattr(ty, "dtype", ""))))
    return out


def _dim(value) -> int | str | None:
    if isinstance(value, tvm.tirx.IntImm):
        return int(value.value)
    return str(value.name) if isinstance(value, tvm.tirx.Var) else None


def relax_entry(mod) -> str:
    """The Relax function of ``mod`` a model runs: ``forward`` (``relax.frontend.nn``),
    ``main`` (the importers) or the only one; ValueError when none of these tells."""
    names = [gv.name_hint for gv, f in mod.functions.items() if not isinstance(f, PrimFunc)]
    for name in ("forward", "main"):
        if name in names:
            return name
    if len(names) != 1:
        raise ValueError(f"cannot tell the entry function among {names}; name it 'forward'")
    return names[0]


def symbolic_bounds(func) -> dict[str, tuple[int | None, int | None]]:
    """The bounds a Relax function declares for its symbolic dimensions (``tir_var_lower_bound``
    and ``tir_var_upper_bound``, which ``from_exported_program`` writes from torch's ``Dim``):
    {name: (lowest, highest)}, either None where undeclared."""
    attrs = func.attrs or {}
    low = {str(k): int(v) for k, v in (attrs.get("tir_var_lower_bound") or {}).items()}
    high = {str(k): int(v) for k, v in (attrs.get("tir_var_upper_bound") or {}).items()}
    return {name: (low.get(name), high.get(name)) for name in sorted(set(low) | set(high))}


def with_upper_bounds(mod, entry: str, highs: dict[str, int]) -> "tvm.IRModule":
    """``mod`` with its ``entry`` Relax function declaring ``highs`` ({symbolic name: highest
    value}) as the upper bounds of those dimensions (``tir_var_upper_bound``, kept for the
    others): what ``from_exported_program`` writes from a ``Dim``'s ``max``, for a program
    exported without one."""
    func = mod[entry]
    declared = (func.attrs or {}).get("tir_var_upper_bound") or {}
    high = {str(k): int(v) for k, v in declared.items()}
    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    out[entry] = func.with_attr("tir_var_upper_bound", {**high, **highs})
    return out


def index_map(func, ndim: int):
    """A TIR index map of ``ndim`` int64 indices computed by ``func(*indices)``."""
    return tirx.IndexMap.from_func(func, ndim=ndim, index_dtype="int64")


def simplify(expr):
    """``expr`` (a TIR expression) simplified by TVM's arithmetic analyzer."""
    return tvm.sym.Analyzer().simplify(expr)


def upper_bound(expr, uppers: dict) -> int | None:
    """The largest value ``expr`` takes when each of its variables named in ``uppers``
    ({name: highest value}) lies in [1, that value]; None when that leaves it unbounded."""
    analyzer = tvm.sym.Analyzer()
    for var in tvm.tirx.analysis.undefined_vars(expr, []):
        high = uppers.get(str(var.name))
        if high is not None:
            analyzer.bind(var, tvm.ir.Range.from_min_extent(1, int(high)))
    bound = analyzer.const_int_bound(expr)
    return None if bound.max_value >= bound.POS_INF else int(bound.max_value)


def lower_bound(expr, lowers: dict) -> int | None:
    """The least value ``expr`` takes when each of its variables named in ``lowers``
    ({name: least value}) is at least that value (and any other at least 1); None when
    nothing bounds it below."""
    analyzer = tvm.sym.Analyzer()
    for var in tvm.tirx.analysis.undefined_vars(expr, []):
        low = max(int(lowers.get(str(var.name), 1)), 1)
        analyzer.bind(var, tvm.ir.Range.from_min_extent(low, 1 << 40))
    bound = analyzer.const_int_bound(expr)
    return None if bound.min_value <= bound.NEG_INF else int(bound.min_value)


def divides(k: int, expr) -> bool:
    """Whether ``k`` provably divides ``expr`` for every value of its variables (a symbolic
    extent padded to whole tiles, ``(n + 4) // 5 * 5``)."""
    return bool(tvm.sym.Analyzer().can_prove_equal(tvm.tirx.floormod(expr, k), 0))


def bounded_analyzer(mod):
    """TVM's arithmetic analyzer with every symbolic dimension of ``mod``'s Relax functions
    bound to the range the function declares for it (``tir_var_lower_bound`` /
    ``tir_var_upper_bound``): ``simplify(T.min(seq, 512))`` is ``seq`` when ``seq <= 128``.
    None when no function declares a bound (a module without symbolic dimensions)."""
    analyzer, bound = tvm.sym.Analyzer(), False
    for func in mod.functions.values():
        bounds = {} if isinstance(func, PrimFunc) else symbolic_bounds(func)
        if not bounds:
            continue
        bound = True
        found = [*relax.analysis.defined_symbolic_vars(func)]
        found += relax.analysis.free_symbolic_vars(func)
        for var in found:
            low, high = bounds.get(str(var.name), (None, None))
            if low is not None and high is not None:
                analyzer.bind(var, tvm.ir.Range(low, high + 1))
    return analyzer if bound else None


def shape_values(expr) -> list | None:
    """The dimensions of a Relax tensor expression as TIR expressions (symbolic ones kept);
    None when it is no tensor or its shape is unknown."""
    values = getattr(getattr(getattr(expr, "ty", None), "shape", None), "values", None)
    return None if values is None else list(values)


def tuple_values(expr) -> list:
    """The elements of a Relax tuple of integers (``strided_slice``'s axes, begins, ends) as
    TIR expressions."""
    return [getattr(f, "value", f) for f in getattr(expr, "fields", ())]


def same_structure(a, b) -> bool:
    """Whether two IR objects compute the same thing (TVM's structural equality: variable,
    buffer and block names are mapped, not compared; attributes are compared)."""
    return bool(tvm_ffi.structural_equal(a, b))


def tensor_dims(expr) -> tuple[int | None, ...] | None:
    """The shape of a Relax tensor expression, a symbolic dimension as None; None when the
    expression is no tensor or its rank is unknown."""
    values = shape_values(expr)
    if values is None:
        return None
    return tuple(int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in values)


def tensor_dtype(expr) -> str:
    """The dtype of a Relax tensor expression ('' when it has none)."""
    return str(getattr(getattr(expr, "ty", None), "dtype", ""))


def constant_values(expr):
    """The values of a Relax tensor constant as a numpy array, None for any other expression
    (TVM 0.27: a constant is a ``GenericConst`` whose ``value`` is a runtime tensor)."""
    value = getattr(expr, "value", None) if isinstance(expr, tvm.ir.expr.GenericConst) else None
    return value.numpy() if hasattr(value, "numpy") else None


def call_name(expr) -> str | None:
    """The operator a Relax call applies (``relax.take``), None for anything else."""
    op = getattr(expr, "op", None)
    return str(op.name) if isinstance(op, tvm.ir.Op) else None


def bindings(func) -> Iterator[tuple[object, object]]:
    """(variable, value) of every binding of a Relax function's body, in order."""
    for block in getattr(func.body, "blocks", ()):
        for binding in block.bindings:
            yield binding.var, binding.value


def estimated_flops(func) -> int | None:
    """TVM's FLOP estimate of a PrimFunc; None when TVM cannot count it (symbolic extents,
    opaque calls)."""
    try:
        return int(tvm.s_tir.analysis.estimate_tir_flops(tvm.IRModule({"main": func})))
    except (RuntimeError, ValueError, TypeError):
        return None


def rewrite_calls(mod, rewrite, with_bindings: bool = False, prune: bool = False) -> "tvm.IRModule":
    """``mod`` with every call of its Relax functions that ``rewrite(call)`` answers with an
    expression replaced by it (calls it answers None for are kept); the result normalized, so
    a nested expression ``rewrite`` returns is bound to a variable of its own. With
    ``with_bindings``, ``rewrite(call, value_of)`` also gets the function that answers a
    dataflow variable's bound value (None for any other expression). With ``prune``, the
    bindings nothing reads any more (what the replaced calls alone used) are removed."""

    @mutator
    class _Rewrite(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            new = rewrite(call, self._value_of) if with_bindings else rewrite(call)
            return call if new is None else new

        def _value_of(self, expr):
            return self.lookup_binding(expr) if isinstance(expr, relax.Var) else None

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gv] = _Rewrite(mod).visit_expr(func)
    out = relax.transform.Normalize()(out)
    if prune:
        for gv, func in list(out.functions.items()):
            if isinstance(func, relax.Function):
                out[gv] = relax.analysis.remove_all_unused(func)
    return out


def call_tir_callee(call):
    """The PrimFunc's GlobalVar a ``call_tir`` calls; None for any other call."""
    if not call.op.same_as(tvm.ir.Op.get("relax.call_tir")):
        return None
    return call.args[0] if hasattr(call.args[0], "name_hint") else None


def retarget_calls(mod, targets: dict) -> "tvm.IRModule":
    """``mod`` with every ``call_tir`` of a PrimFunc named in ``targets`` (name: GlobalVar)
    calling that GlobalVar instead, its arguments and output kept."""

    def rewrite(call):
        callee = call_tir_callee(call)
        if callee is None or callee.name_hint not in targets:
            return None
        return relax.Call(call.op, [targets[callee.name_hint], *call.args[1:]], call.attrs,
                          call.ty_args)  # fmt: skip

    return rewrite_calls(mod, rewrite)


def rewrite_bindings(mod, rewrite) -> "tvm.IRModule":
    """``mod`` with every binding of its Relax functions' dataflow blocks offered, in order,
    to ``rewrite(var, value, emit)`` once its value is rewritten: ``emit(expr)`` binds an
    expression to a fresh variable (placed before the binding's later uses) and returns it;
    an expression ``rewrite`` returns replaces ``var`` in every later use (None keeps it).
    Bindings nothing uses any more are removed."""

    @mutator
    class _Rewrite(PyExprMutator):
        def visit_var_binding_(self, binding):
            builder = self.builder_
            if not builder.current_block_is_dataflow():
                return super().visit_var_binding_(binding)
            var = builder.emit(self.visit_expr(binding.value), binding.var.name)
            new = rewrite(var, self.lookup_binding(var), builder.emit)
            if not isinstance(binding.var, relax.DataflowVar):  # the block's output
                new = builder.emit_output(var if new is None else new, binding.var.name)
            self.set_var_remap(binding.var, var if new is None else new)

    out = tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gv] = relax.analysis.remove_all_unused(_Rewrite(mod).visit_expr(func))
    return out


def torch_importer():
    """TVM's ``from_exported_program`` (imported here, not at import time: it imports torch)."""
    from tvm.relax.frontend.torch import from_exported_program  # lazy: it imports torch

    return from_exported_program


def torch_converters() -> set[str]:
    """The names of the torch operators TVM's ``from_exported_program`` converts."""
    from tvm.relax.frontend.torch.exported_program_translator import (  # lazy: imports torch
        ExportedProgramImporter,
    )

    return set(ExportedProgramImporter().convert_map)


def gathered_params(func) -> set[int]:
    """Positions of a PrimFunc's parameters whose buffer its blocks read only through
    data-dependent indices (a read region whose index loads from another buffer: a gather's
    table, ``table[ids[i], j]``), never at an index computed from the loops alone."""
    direct, indirect = [], []
    for block in sblocks(func):
        for region in block.reads:
            data_dependent = any(_holds_load(r.min) for r in region.region)
            (indirect if data_dependent else direct).append(region.source)
    # TVM 0.27: a tensor parameter is the buffer itself (a Var with a shape)
    return {
        i
        for i, param in enumerate(func.params)
        if any(v.same_as(param) for v in indirect) and not any(v.same_as(param) for v in direct)
    }


def _holds_load(expr) -> bool:
    """Whether a TIR expression reads a buffer anywhere inside it."""
    if isinstance(expr, tvm.ir.TensorLoad):
        return True
    parts = [getattr(expr, f, None) for f in ("a", "b", "value", "condition", "true_value",
                                              "false_value")]  # fmt: skip
    parts += list(getattr(expr, "args", None) or [])
    return any(p is not None and not isinstance(p, str) and _holds_load(p) for p in parts)
