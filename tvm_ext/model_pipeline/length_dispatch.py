"""One executable for every length of a symbolic model: its entry dispatches on the
symbolic dimension (``R.If`` on ``n <= upper``) to a copy of the graph per range of lengths,
each calling that range's schedules (:func:`dispatching`). The ranges come from tuning at
named lengths (:mod:`~tvm_ext.model_pipeline.length_tuner`) and, for every symbolic model
``compile`` builds, from the rules scheduled for short lengths (:func:`bounded_rules`);
:func:`merged` lays one set of ranges over the other."""

from __future__ import annotations

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ScheduleNotApplicable, UnsupportedModel
from tvm_ext.model_pipeline.length_buckets import symbolic
from tvm_ext.schedules.rules.dispatch import schedule_func

REST = "rest"  # the tag of the range of every length past the last upper bound


def variant_base(name: str) -> str:
    """The PrimFunc a range's variant was made from: ``name`` less the ``__le<upper>`` or
    ``__rest`` tag :func:`dispatching` gives it (``name`` itself when it has none)."""
    base, sep, tag = name.rpartition("__")
    if sep and (tag == REST or (tag.startswith("le") and tag[2:].isdigit())):
        return base
    return name


def dispatching(mod, entry: str, var: str, uppers, variants: list[dict]):
    """``mod`` (the symbolic model, scheduled by the rules) with ``entry`` dispatching on the
    symbolic dimension ``var``: range ``k`` (lengths up to ``uppers[k]``; the last range, one
    more than ``uppers``, every longer length) runs ``variants[k]`` ({PrimFunc name: its
    schedule for the range}) in a copy of the entry of its own, which ``entry`` calls under
    ``R.If`` on the dimension; a range without variants runs the rules' entry. ``mod``
    itself when no range has one."""
    if not any(variants):
        return mod
    if len(variants) != len(uppers) + 1:
        raise ValueError(f"{len(variants)} variant sets for {len(uppers) + 1} ranges")
    relax = tvm_api.relax
    main = mod[entry]
    builder = relax.BlockBuilder(mod)
    callees = []
    for k, chosen in enumerate(variants):
        if not chosen:
            callees.append(None)
            continue
        tag = f"le{uppers[k]}" if k < len(uppers) else REST
        renamed = {name: builder.add_func(f.with_attr("global_symbol", f"{name}__{tag}"),
                                          f"{name}__{tag}")
                   for name, f in chosen.items()}  # fmt: skip
        one = tvm_api.retarget_calls(tvm_api.IRModule({entry: main}), renamed)[entry]
        copy = relax.utils.copy_with_new_vars(one).without_attr("global_symbol")
        callees.append(builder.add_func(copy, f"{entry}_{var}_{tag}"))
    out = builder.get()
    out = tvm_api.IRModule({gv: f for gv, f in out.functions.items() if gv.name_hint != entry},
                           attrs=out.attrs)  # fmt: skip
    renamed_rules = relax.utils.copy_with_new_vars(main).without_attr("global_symbol")
    builder = relax.BlockBuilder(out)
    rules_gv = builder.add_func(renamed_rules, f"{entry}_rules")
    params = [relax.Var(str(p.name), p.ty) for p in main.params]
    n = _dimension(main, var)
    with builder.function(entry, params, attrs=dict(main.attrs or {})):
        branch = relax.Call(callees[-1] or rules_gv, params)
        for upper, callee in reversed(list(zip(uppers, callees[:-1]))):
            branch = relax.If(relax.prim_value(n <= upper),
                              relax.Call(callee or rules_gv, params), branch)  # fmt: skip
        builder.emit_func_output(builder.emit(branch))
    return builder.get()


def _dimension(func, var: str):
    """The TIR variable of the symbolic dimension ``var`` in a Relax function's parameters."""
    for p in func.params:
        for d in getattr(getattr(p.ty, "shape", None), "values", None) or ():
            if isinstance(d, tvm_api.tirx.Var) and str(d.name) == var:
                return d
    raise UnsupportedModel(f"no parameter of {func} has the dimension {var!r} on its own")


# The short ranges a symbolic model's rules are scheduled for as well: up to each length, a
# function's work is counted at it, so a kernel too small for a parallel region at such
# lengths runs serially there (a fork and join costs ~2-3 us on the 2-core hosts: BERT's
# 16-token softmax, layer norms and reshapes ran 3x slower parallel than serial), and a
# contraction's symbolic rows are padded to the row tile that runs the range's lengths in the
# least time (tile_shape.symbolic_rows). The cuts keep the padded rows within 12.5 % of the
# length at every length from 9 to 64 with the 8-row tiles of AVX-512 (up to 8, one tile of 8
# rows: a weight streamed from memory bounds the kernel; past 64, 8-row tiles pad under 11 %);
# with (16, 64), every length padded to 8-row tiles, BERT's symbolic model ran 1.33x / 1.23x /
# 1.13x its static build at 9 / 17 / 33 tokens (Zen 4, 2 threads). Consecutive ranges whose
# schedules are alike are merged (bounded_rules).
SHORT_UPPERS = (8, 10, 12, 14, 16, 18, 21, 24, 28, 32, 35, 40, 42, 48, 54, 64)


def bounded_rules(applied_mod, lowered, target, var: str, low: int | None, high: int | None):
    """(uppers, variants) for :func:`dispatching`: each symbolic PrimFunc of ``lowered``
    scheduled by its rule for each range of ``var`` that :data:`SHORT_UPPERS` cut the
    declared ``[low, high]`` into (its ``tir_var_lower_bound`` and ``tir_var_upper_bound``:
    the rules count work at a range's highest length and may rely on its least, e.g. a
    symbolic softmax's lanes of partials past 64 tokens), where that schedule differs from the
    one ``applied_mod`` holds (the rule's for any length); consecutive short ranges that
    schedule alike are one range."""
    cuts = [u for u in SHORT_UPPERS if (high is None or u < high) and (low is None or u >= low)]
    lows = [low, *(u + 1 for u in cuts)]
    ranges = [(lo, hi, _range_variants(applied_mod, lowered, target, var, lo, hi))
              for lo, hi in zip(lows, [*cuts, None])]  # fmt: skip
    *short, rest = ranges
    kept: list[tuple[int, dict]] = []
    for _, upper, chosen in short:
        if kept and _alike(kept[-1][1], chosen):
            kept[-1] = (upper, chosen)  # the wider range's schedules serve both
        else:
            kept.append((upper, chosen))
    while kept and not kept[-1][1] and not rest[2]:  # what the rules' schedules do anyway
        kept.pop()
    return tuple(u for u, _ in kept), [c for _, c in kept] + [rest[2]]


def _range_variants(applied_mod, lowered, target, var: str, low, high) -> dict:
    declared = {}
    if high is not None:
        declared["tir_var_upper_bound"] = {var: high}
    if low is not None and low > 1:
        declared["tir_var_lower_bound"] = {var: low}
    if not declared:
        return {}
    chosen = {}
    for gv, func in lowered.functions.items():
        if not isinstance(func, tvm_api.PrimFunc) or not symbolic(func):
            continue
        name = gv.name_hint
        try:
            sch, _ = schedule_func(func.with_attrs(declared), target)
        except ScheduleNotApplicable:  # no rule takes it: it stays as the rules left it
            continue
        made = tvm_api.main_func(sch.mod)
        for key in declared:
            made = made.without_attr(key)
        if not tvm_api.same_structure(_named(made), _named(applied_mod[name])):
            chosen[name] = made
    return chosen


def merged(first, second):
    """Two dispatches on one dimension, ``(uppers, variants)`` each, as one: the union of
    their bounds, each range running ``second``'s variants over ``first``'s."""
    (ua, va), (ub, vb) = first, second
    uppers = tuple(sorted(set(ua) | set(ub)))

    def index(us, n):
        return next((i for i, u in enumerate(us) if n is not None and n <= u), len(us))

    ends = [*uppers, None]  # a range is known by its highest length (None: no bound)
    return uppers, [{**va[index(ua, n)], **vb[index(ub, n)]} for n in ends]


def _named(func):
    return func.with_attr("global_symbol", "main")


def _alike(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        tvm_api.same_structure(_named(a[k]), _named(b[k])) for k in a
    )
