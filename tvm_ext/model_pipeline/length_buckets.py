"""A model of symbolic length, tuned at the lengths a user names and run from one executable
that dispatches each call to the schedules tuned for the nearest of them.

MetaSchedule tunes static shapes only (upstream #11747). So each named length ``b`` is a
static model of its own: the symbolic model, lowered once as :func:`compile` lowers it, with
the dimension bound to ``b`` and every PrimFunc specialized at its call site
(:func:`at_length`), tuned by the model tuner as any static model is (its tasks' logs keyed
by the specialized functions, its manifest under the length's key).

The executable is the symbolic model: every PrimFunc keeps its symbolic extent. A task whose
search beat its rule at length ``b`` gets, for ``b``'s bucket, the winning trace generalized
to the symbolic function (:func:`generalized_trace`: each sampled tile keeps its inner
factors and its outer one becomes a ceiling, so the tail of a symbolic axis is a predicate);
the others keep their rule's symbolic schedule. The entry function becomes a dispatch on the
dimension (``R.If`` on ``n <= upper``), one copy of the graph per bucket that differs from
the rules', each calling its own functions
(:func:`~tvm_ext.model_pipeline.length_dispatch.dispatching`).
"""

from __future__ import annotations

import dataclasses

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import UnsupportedModel
from tvm_ext.records.logs import structural_hash


@dataclasses.dataclass(frozen=True)
class Buckets:
    """The lengths a model was tuned at, for its symbolic dimension ``var``: a length ``n``
    runs the schedules of the nearest one (ties to the longer), i.e. of the first bucket
    whose ``upper`` is at least ``n``."""

    var: str
    lengths: tuple[int, ...]

    @property
    def uppers(self) -> tuple[int, ...]:
        """The longest length each bucket serves (the last serves every longer one)."""
        ls = self.lengths
        return tuple((a + b - 1) // 2 for a, b in zip(ls, ls[1:]))

    def of(self, n: int) -> int:
        """The index of the bucket that serves length ``n``."""
        return next((i for i, u in enumerate(self.uppers) if n <= u), len(self.lengths) - 1)

    @staticmethod
    def named(lengths, bounds: dict, model: str) -> "Buckets":
        """``lengths`` (a list, for a model with one symbolic dimension, or {name: list})
        checked against the model's declared ``bounds`` ({name: (lowest, highest)})."""
        if not bounds:
            raise UnsupportedModel(
                f"{model} has no symbolic dimension: tuning at lengths takes one; "
                "tune(model) tunes it as it is"
            )
        if isinstance(lengths, dict):
            if len(lengths) != 1:
                raise ValueError(f"lengths= names one symbolic dimension; got {sorted(lengths)}")
            ((var, values),) = lengths.items()
            if var not in bounds:
                raise ValueError(
                    f"{model} has no symbolic dimension {var!r}; it has {sorted(bounds)}"
                )
        else:
            if len(bounds) != 1:
                raise UnsupportedModel(
                    f"{model}: symbolic dimensions {sorted(bounds)}; name the one to tune at "
                    "(lengths={name: [...]}); the others must be bound first"
                )
            (var,), values = bounds.keys(), lengths
        if len(bounds) != 1:
            raise UnsupportedModel(
                f"{model}: tuning at lengths takes one symbolic dimension; it has "
                f"{sorted(bounds)} (bind the others first)"
            )
        values = list(values)
        if not values or any(isinstance(v, bool) or not isinstance(v, int) for v in values):
            raise ValueError(f"lengths must be a non-empty list of ints, got {values!r}")
        low, high = bounds[var]
        outside = [
            v for v in values if (low is not None and v < low) or (high is not None and v > high)
        ]
        if outside or any(v < 1 for v in values):
            raise ValueError(
                f"lengths {outside or values} outside {var}'s declared range [{low}, {high}]"
            )
        return Buckets(var, tuple(sorted(set(values))))


def symbolic(func) -> bool:
    """Whether a PrimFunc has a parameter of symbolic shape (or a scalar shape parameter)."""
    for p in func.params:
        shape = getattr(p, "shape", None)  # TVM 0.27: a tensor parameter carries its shape
        if shape is None or any(not isinstance(d, tvm_api.tirx.IntImm) for d in shape):
            return True
    return False


def at_length(lowered, entry: str, var: str, value: int):
    """``lowered`` (a lowered symbolic model) with ``var`` bound to ``value`` in ``entry`` and
    every symbolic PrimFunc specialized at each call site (a function called with two static
    shapes becomes two). Returns (the static module, {static function name: the symbolic
    function it specializes}). UnsupportedModel when a function stays symbolic."""
    bound = tvm_api.relax.transform.BindSymbolicVars({var: value}, entry)(lowered)
    call_tir = tvm_api.ir.Op.get("relax.call_tir")
    made: dict[str, str] = {}  # structural hash -> name of the static function
    funcs: dict[str, object] = {}
    origin: dict[str, str] = {}
    by_site: dict[tuple, str] = {}

    def site(call):
        return (call.args[0].name_hint, str(call.args[1].ty), str(call.ty_args),
                str(call.args[2]) if len(call.args) > 2 else "")  # fmt: skip

    for _, value_ in tvm_api.bindings(bound[entry]):
        if not (isinstance(value_, tvm_api.relax.Call) and value_.op.same_as(call_tir)):
            continue
        gv = value_.args[0]
        func = bound[gv]
        if not symbolic(func) or site(value_) in by_site:
            continue
        static = _specialized(func, value_, gv.name_hint)
        key = structural_hash(static)
        if key not in made:
            name = gv.name_hint if gv.name_hint not in funcs else _fresh(gv.name_hint, funcs)
            made[key] = name
            funcs[name] = static
            origin[name] = gv.name_hint
        by_site[site(value_)] = made[key]

    out = tvm_api.IRModule(
        {gv: f for gv, f in bound.functions.items()
         if not isinstance(f, tvm_api.PrimFunc) or not symbolic(f)},
        attrs=bound.attrs,
    )  # fmt: skip
    builder = tvm_api.relax.BlockBuilder(out)
    added = {name: builder.add_func(f, name) for name, f in funcs.items()}  # typed GlobalVars
    out = builder.get()

    def rewrite(call):
        if not call.op.same_as(call_tir) or site(call) not in by_site:
            return None
        callee = added[by_site[site(call)]]
        # The specialized function has no scalar parameters left: its call passes tensors.
        args = call.args[1]
        tensors = [a for a in (args.fields if hasattr(args, "fields") else [args])
                   if not isinstance(a.ty, tvm_api.ir.PrimType)]  # fmt: skip
        return tvm_api.relax.Call(call_tir, [callee, tvm_api.relax.Tuple(tensors)], call.attrs,
                                  call.ty_args)  # fmt: skip

    out = tvm_api.rewrite_calls(out, rewrite)
    # What depends on the length alone (position ids, masks) is a constant now.
    fold = tvm_api.transform.Sequential(
        [
            tvm_api.relax.transform.FoldConstant(),
            tvm_api.relax.transform.DeadCodeElimination([entry]),
        ]
    )
    out = fold(out)
    kept = {gv.name_hint for gv in out.functions}
    return out, {k: v for k, v in origin.items() if k in kept}


def _fresh(name: str, taken: set) -> str:
    i = 1
    while f"{name}_{i}" in taken:
        i += 1
    return f"{name}_{i}"


def _specialized(func, call, name: str):
    """``func`` with every symbolic dimension bound as the call site binds it (the site's
    arguments, outputs and shape arguments are static once the model's length is)."""
    simplify = tvm_api.simplify
    args = call.args[1]
    out = call.ty_args[0]
    # What each parameter receives, in order: the arguments (tensors, or scalars passed as
    # PrimValues), the outputs, the shape arguments.
    given = [a if isinstance(a.ty, tvm_api.ir.PrimType) else a.ty
             for a in (args.fields if hasattr(args, "fields") else [args])]  # fmt: skip
    given += list(out.fields) if hasattr(out, "fields") else [out]
    if len(call.args) > 2:
        given += list(call.args[2].values)
    if len(given) != len(func.params):
        raise UnsupportedModel(f"{name}: {len(given)} values for {len(func.params)} parameters")
    values = []
    for p, value in zip(func.params, given):
        if getattr(p, "shape", None) is None:  # a scalar parameter
            value = simplify(value)
            if not isinstance(value, tvm_api.tirx.IntImm):
                raise UnsupportedModel(f"{name}: a scalar argument {value} stays symbolic")
            values.append(int(value))
            continue
        dims = getattr(getattr(value, "shape", None), "values", None)
        dims = None if dims is None else [simplify(d) for d in dims]
        if dims is None or any(not isinstance(d, tvm_api.tirx.IntImm) for d in dims):
            raise UnsupportedModel(f"{name}: an argument of symbolic shape at a static length")
        values.append(tuple(int(d) for d in dims))
    static = bound_at(func, values)
    if symbolic(static):
        raise UnsupportedModel(f"{name}: its symbolic dimensions are not all bound by its call")
    return static


def bound_at(func, values: list):
    """``func`` with every symbolic dimension bound by the static values its parameters
    receive, in order: a tensor's shape (a tuple of ints) or a scalar parameter's int. A
    dimension that is an expression (``T.min(n, 512)``) is bound through the variables the
    other parameters bind."""
    mapping = {}
    for p, value in zip(func.params, values):
        if getattr(p, "shape", None) is None:  # a scalar parameter
            mapping[p] = tvm_api.tirx.IntImm(_index_dtype(p), int(value))
            continue
        plain = all(isinstance(d, (tvm_api.tirx.IntImm, tvm_api.tirx.Var)) for d in p.shape)
        if plain and any(not isinstance(d, tvm_api.tirx.IntImm) for d in p.shape):
            shape = [
                tvm_api.tirx.IntImm(_index_dtype(old), int(d)) for old, d in zip(p.shape, value)
            ]
            mapping[p] = tvm_api.tirx.decl_buffer(shape, p.dtype, str(p.name))
    return func.specialize(mapping)


def _index_dtype(expr) -> str:
    """The integer type of a shape dimension or shape parameter (Relax's are int64)."""
    return str(getattr(getattr(expr, "ty", None), "dtype", "int64"))


def generalized_trace(trace_json):
    """A trace (JSON) found on a static specialization, for the symbolic function: every
    sampled tile's factors are used as constants, the outermost one as a ceiling (``None``),
    so a symbolic extent splits into the same inner tiles and a predicated tail."""
    insts, decisions = trace_json
    decided = {int(i): d for i, d in decisions}
    constant = {}
    for i, inst in enumerate(insts):
        if inst[0] == "SamplePerfectTile" and i in decided:
            factors = decided[i]
            constant.update(zip(inst[3], ["None", *factors[1:]]))
    out = []
    for inst in insts:
        kind, inputs, attrs, outputs = inst
        out.append([kind, [_constant(x, constant) for x in inputs], attrs, outputs])
    return [out, decisions]


def _constant(x, constant):
    if isinstance(x, str) and x in constant:
        return constant[x]
    if isinstance(x, list):
        return [_constant(y, constant) for y in x]
    return x
