"""Tuning a model of symbolic length at the lengths a user names: each length a static model
(every function specialized where it is called), a trace found at one length generalized to
every length, one executable whose entry dispatches each call to its bucket's schedules."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import UnsupportedModel
from tvm_ext.model_pipeline import length_buckets as lb
from tvm_ext.model_pipeline import length_dispatch as ld
from tvm_ext.model_pipeline.compile import ModelSource, bind_and_lower, cpu_target
from tvm_ext.model_pipeline.length_tuner import inputs_at
from tvm_ext.model_pipeline.repacks import fold_prepacks

torch = pytest.importorskip("torch", reason="the torch models need the [torch] extra")

from test_symbolic import symbolic_block  # noqa: E402,F401  (the fixture, shared)


@pytest.fixture(scope="module")
def block(symbolic_block):  # noqa: F811  (the imported fixture)
    """test_symbolic's symbolic transformer block, lowered as compile lowers it."""
    model, _ = symbolic_block
    target = cpu_target(None)
    source = ModelSource.of(model, None, None, None)
    ((var, _),) = tvm_api.symbolic_bounds(source.mod[source.entry]).items()
    return model, source, bind_and_lower(source, target), var, target


def _vm(mod, target):
    executable = tvm_api.relax.build(mod, target=target)
    return tvm_api.relax.VirtualMachine(executable, tvm_api.cpu(0))


def _run(vm, x):
    return vm["main"](tvm_api.tensor(x, tvm_api.cpu(0))).numpy()


def test_buckets_serve_the_nearest_tuned_length():
    b = lb.Buckets("n", (16, 40, 128))
    assert b.uppers == (27, 83)
    assert [b.of(n) for n in (2, 16, 27, 28, 83, 84, 500)] == [0, 0, 0, 1, 1, 2, 2]
    bounds = {"n": (2, 96)}
    assert lb.Buckets.named([40, 8, 40], bounds, "m").lengths == (8, 40)
    assert lb.Buckets.named({"n": [8]}, bounds, "m").lengths == (8,)
    with pytest.raises(ValueError, match=r"outside n's declared range \[2, 96\]"):
        lb.Buckets.named([8, 97], bounds, "m")
    with pytest.raises(ValueError, match="non-empty list of ints"):
        lb.Buckets.named([], bounds, "m")
    with pytest.raises(ValueError, match="no symbolic dimension 'k'"):
        lb.Buckets.named({"k": [8]}, bounds, "m")
    with pytest.raises(UnsupportedModel, match="no symbolic dimension"):
        lb.Buckets.named([8], {}, "m")
    with pytest.raises(UnsupportedModel, match="name the one"):
        lb.Buckets.named([8], {"n": (2, 96), "b": (1, 4)}, "m")


def test_two_dispatches_merge_into_the_union_of_their_ranges():
    a = ((16, 64), [{"f": 1}, {"f": 2}, {}])
    b = ((27,), [{"g": 3}, {"f": 9}])
    uppers, ranges = ld.merged(a, b)
    assert uppers == (16, 27, 64)
    assert ranges == [{"f": 1, "g": 3}, {"f": 2, "g": 3}, {"f": 9}, {"f": 9}]


def test_at_a_length_every_function_is_static_and_the_model_unchanged(block):
    model, source, lowered, var, target = block
    static, origin = lb.at_length(lowered, source.entry, var, 13)
    prims = {gv.name_hint: f for gv, f in static.functions.items()
             if isinstance(f, tvm_api.PrimFunc)}  # fmt: skip
    assert prims and not any(lb.symbolic(f) for f in prims.values())
    assert set(origin) <= set(prims) and all(lb.symbolic(lowered[g]) for g in origin.values())
    (x,) = inputs_at(source, var, 13)
    assert x.shape == (1, 13, 32)
    np.testing.assert_allclose(_run(_vm(static, target), x), model.reference([x]),
                               rtol=1e-4, atol=1e-4)  # fmt: skip


def _design_trace(func, target):
    """A MetaSchedule sketch of ``func`` with sampled tiles, post-processed: a trace as the
    search would log it (JSON)."""
    import json

    from tvm_ext.kernel_tuner.space import design_space

    ms = tvm_api.ms
    ctx = ms.TuneContext(mod=tvm_api.as_module(func), target=target, rand_state=3,
                         space_generator=design_space(target), task_name="t")  # fmt: skip
    sch = ctx.generate_design_space()[0]
    assert all(p.apply(sch) for p in ms.postproc.Postproc.create("llvm"))
    trace = _plain(sch.trace.as_json())
    assert "SamplePerfectTile" in json.dumps(trace)
    return trace


def _plain(x):
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if hasattr(x, "value") and not hasattr(x, "__len__"):
        return x.value
    return [_plain(y) for y in x]


def test_a_trace_found_at_one_length_runs_at_every_length(block):
    """The search's tiles at length 16 keep their inner factors on the symbolic function and
    the outer one becomes a ceiling: parity at lengths that are no multiple of the tile."""
    from tvm_ext.records.logs import apply_trace

    _, source, lowered, var, target = block
    static, origin = lb.at_length(lowered, source.entry, var, 16)
    name = next(n for n in sorted(static.functions, key=lambda g: g.name_hint)
                if "matmul" in n.name_hint).name_hint  # fmt: skip
    trace = _design_trace(static[name], target)
    symbolic = lowered[origin[name]].with_attr("global_symbol", "main")
    sch = apply_trace(symbolic, lb.generalized_trace(trace))
    text = sch.mod.script()
    assert "T.parallel" in text and "// T.int64(" in text  # tiled: an outer ceiling loop
    plain = tvm_api.build(tvm_api.as_module(symbolic), target)
    tuned = tvm_api.build(sch.mod, target)
    rng = np.random.default_rng(0)
    for n in (3, 16, 37):
        args = []
        for p in symbolic.params:
            shape = [int(d) if isinstance(d, tvm_api.tirx.IntImm) else n for d in p.shape]
            args.append(rng.standard_normal(shape).astype(str(p.dtype)))
        want = [tvm_api.tensor(a, tvm_api.cpu(0)) for a in args]
        got = [tvm_api.tensor(a, tvm_api.cpu(0)) for a in args]
        plain(*want)
        tuned(*got)
        np.testing.assert_allclose(got[-1].numpy(), want[-1].numpy(), rtol=1e-5, atol=1e-5)


def test_each_bucket_runs_its_own_functions(block):
    """A bucket's variant is called at the lengths it serves and at no other: a variant that
    writes zeros changes the output up to the bucket's upper bound (here 27), and from 28 on
    the rules' function runs."""
    model, source, lowered, var, target = block
    from tvm_ext.schedules.rules.dispatch import apply

    applied = apply(lowered, target)
    name = next(g.name_hint for g, f in lowered.functions.items()
                if isinstance(f, tvm_api.PrimFunc) and "matmul" in g.name_hint)  # fmt: skip
    zeros = _zeros_like(lowered[name])
    buckets = lb.Buckets(var, (16, 40))
    mod = ld.dispatching(applied.mod, source.entry, var, buckets.uppers, [{name: zeros}, {}])
    vm = _vm(fold_prepacks(mod, source.entry), target)
    for n, wrong in ((5, True), (27, True), (28, False), (90, False)):
        (x,) = inputs_at(source, var, n)
        close = np.allclose(_run(vm, x), model.reference([x]), rtol=1e-4, atol=1e-4)
        assert close != wrong, n


def test_every_length_range_shares_one_repack_of_each_weight(block):
    """A symbolic model's length ranges each call their own variant of a weight's matmul, each
    with its own repack of the weight: the repacks run once per weight, one constant for every
    range (the packed weights take what the rules' own schedules alone take), and the model
    still matches at a length of each range."""
    from tvm_ext.schedules.rules.dispatch import apply

    from tvm_ext.model_pipeline.compile import short_lengths
    from tvm_ext.model_pipeline.repacks import REPACK_SUFFIX

    model, source, lowered, var, target = block
    rules = apply(lowered, target).mod
    dispatched = short_lengths(rules, lowered, source, target)
    names = [g.name_hint for g in dispatched.functions]
    assert sum(n.startswith(f"{source.entry}_{var}_") for n in names) >= 2, names
    folded = fold_prepacks(dispatched, source.entry)
    assert not any(REPACK_SUFFIX in g.name_hint for g in folded.functions)
    assert _constant_bytes(folded) == _constant_bytes(fold_prepacks(rules, source.entry))
    vm = _vm(folded, target)
    for n in (5, 13, 40, 90):
        (x,) = inputs_at(source, var, n)
        np.testing.assert_allclose(_run(vm, x), model.reference([x]), rtol=1e-4, atol=1e-4)


def _constant_bytes(mod) -> int:
    """The bytes of the distinct tensors a module's Relax functions bind as constants."""
    seen: dict[int, int] = {}

    def visit(expr):
        value = getattr(expr, "value", None)
        if isinstance(value, tvm_api.runtime.Tensor):
            seen[value.data_ptr()] = value.numpy().nbytes

    for func in mod.functions.values():
        if isinstance(func, tvm_api.relax.Function):
            tvm_api.relax.analysis.post_order_visit(func, visit)
    return sum(seen.values())


def _zeros_like(func):
    """A PrimFunc of ``func``'s signature whose (last) output is all zeros."""
    from tvm import te

    *ins, out = func.params
    placeholders = [te.placeholder(tuple(p.shape), str(p.dtype), str(p.name)) for p in ins]
    result = te.compute(tuple(out.shape), lambda *i: tvm_api.tirx.const(0, str(out.dtype)))
    return te.create_prim_func([*placeholders, result])


def test_lengths_outside_the_declared_range_are_refused_before_any_work(block, tmp_path):
    import tvm_ext

    with pytest.raises(ValueError, match=r"lengths \[1000\] outside"):
        tvm_ext.tune(block[0], trials=8, lengths=[8, 1000], log_dir=str(tmp_path))
    with pytest.raises(ValueError, match="not a kernel"):
        tvm_ext.tune(tvm_ext.kernels.matmul(16, 16, 16), lengths=[8])
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_model_tuned_at_lengths_runs_every_length_and_replays(block, tmp_path):
    """One executable for every length, parity in each bucket (odd lengths included); the
    replay rebuilds it from the logs with the buckets the tune kept."""
    import tvm_ext

    model, source, _, var, _ = block
    r = tvm_ext.tune(model, trials=16, batch=8, lengths=[8, 40], log_dir=str(tmp_path), seed=0,
                     progress=False)  # fmt: skip
    assert list(r.lengths["length"]) == [8, 40] and r.trials <= 16
    assert all(p.latency is not None for p in r.per_length)
    replayed = tvm_ext.replay(model, log_dir=str(tmp_path))
    assert list(replayed.tasks["kept"]) == list(r.lengths["kept"])
    for n in (2, 8, 23, 24, 41, 96):
        (x,) = inputs_at(source, var, n)
        for compiled in (r.compiled, replayed.compiled):
            np.testing.assert_allclose(compiled.run(x), model.reference([x]), rtol=1e-4,
                                       atol=1e-4)  # fmt: skip


def test_short_lengths_run_small_kernels_serially(block):
    """compile() of a symbolic model: up to each short upper bound, every function is
    scheduled with its work counted at that bound, so a kernel too small for a parallel
    region there runs serially (the rules' own schedule, for any length, is parallel)."""
    from tvm_ext.schedules.rules.dispatch import apply

    import tvm_ext

    model, source, lowered, var, target = block
    applied = apply(lowered, target)
    uppers, variants = ld.bounded_rules(applied.mod, lowered, target, var, 2, 96)
    assert uppers and set(uppers) <= set(ld.SHORT_UPPERS) and len(variants) == len(uppers) + 1
    serial = [
        name
        for name, f in variants[0].items()
        if "T.parallel" not in f.script() and "T.parallel" in applied.mod[name].script()
    ]
    assert serial, "no kernel runs serially at short lengths"
    compiled = tvm_ext.compile(model)
    names = {g.name_hint for g in compiled.module.functions}
    assert f"main_{var}_le{uppers[0]}" in names and f"{serial[0]}__le{uppers[0]}" in names
