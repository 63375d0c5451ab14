"""Symbolic lengths: a model exported with a dynamic dimension (a sequence length) compiles
once and runs at any length within its declared range, matching torch at each; the boundary
checks a call's lengths against each other and the range. The rules' side of symbolic
extents is tested in test_symbolic_rules.py."""

from __future__ import annotations

import numpy as np
import pytest
import tvm

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import bind_symbolic
from tvm_ext.base.errors import InputError


def test_bind_symbolic_checks_agreement_and_range():
    dims = [(1, "seq", 8), ("seq",)]
    assert bind_symbolic("m", ["x", "mask"], dims, [(1, 5, 8), (5,)], {"seq": (2, 9)}) == {"seq": 5}
    with pytest.raises(InputError, match="'mask' has seq=4 .* 'x' has seq=5"):
        bind_symbolic("m", ["x", "mask"], dims, [(1, 5, 8), (4,)])
    with pytest.raises(InputError, match=r"seq=10 .* outside .* \[2, 9\]") as info:
        bind_symbolic("m", ["x", "mask"], dims, [(1, 10, 8), (10,)], {"seq": (2, 9)})
    assert info.value.input == "x" and info.value.valid == (2, 9)


torch = pytest.importorskip("torch", reason="the torch models need the [torch] extra")


class _Block(torch.nn.Module):
    """A pre-norm transformer block: the shape of a ViT/BERT/GPT layer, at toy width."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d)
        )

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


@pytest.fixture(scope="module")
def symbolic_block():
    import tvm_ext

    torch.manual_seed(0)
    seq = torch.export.Dim("seq", min=2, max=96)
    model = tvm_ext.from_torch(
        _Block(), [torch.randn(1, 11, 32)], dynamic_shapes={"x": {1: seq}}, name="block"
    )
    return model, tvm_ext.compile(model)


def test_one_compile_runs_every_length_and_matches_torch(symbolic_block):
    model, compiled = symbolic_block
    ((dims, dtype),) = compiled.input_specs
    assert dims[0] == 1 and dims[2] == 32 and isinstance(dims[1], str) and dtype == "float32"
    assert compiled.bounds == {dims[1]: (2, 96)}
    assert model.input_specs == compiled.input_specs
    rng = np.random.default_rng(1)
    for n in (2, 3, 16, 37, 96):  # the ends of the range, odd lengths, a whole number of vectors
        x = rng.standard_normal((1, n, 32)).astype(np.float32)
        out = compiled.run(x)
        assert out.shape == (1, n, 32)
        _, max_rel = compiled.check([x])  # raises ParityError past float32's tolerance
        assert max_rel < 1e-4
        np.testing.assert_allclose(out, model.reference([x]), rtol=1e-4, atol=1e-4)


def test_a_length_outside_the_declared_range_is_refused(symbolic_block):
    model, compiled = symbolic_block
    for n in (1, 97):
        x = np.zeros((1, n, 32), np.float32)
        with pytest.raises(InputError, match=rf"={n} \(axis 1\), outside .* \[2, 96\]"):
            compiled.run(x)
        with pytest.raises(ValueError, match="outside"):
            model.reference([x])
    with pytest.raises(InputError, match=r"takes shape \(1, \w+, 32\)"):
        compiled.run(np.zeros((1, 5, 31), np.float32))


def test_the_profile_counts_each_kernel_at_the_length_it_ran(symbolic_block):
    """A symbolic kernel's FLOPs and floor are those of the shapes its call received (TVM's
    estimate of the symbolic function takes the length as 1 and gives no floor), and a
    length range's variant (``<name>__le64``) is reported under the rule that scheduled it."""
    import tvm_ext

    model, compiled = symbolic_block
    rng = np.random.default_rng(3)
    flops = {}
    for n in (16, 64):
        x = rng.standard_normal((1, n, 32)).astype(np.float32)
        result = tvm_ext.profile(compiled, [x], min_seconds=0.05, min_runs=2)
        kernels = [r for r in result.rows if r.kind == "kernel"]
        assert kernels and all(r.rule for r in kernels)
        assert any("__le" in r.name for r in kernels)  # the short range's variants ran
        matmuls = [r for r in kernels if r.rule == "contraction"]
        assert len(matmuls) >= 4
        for r in matmuls:
            # At least a 16-long dot product (a head's width) per token.
            assert r.flops >= 2 * n * 16 and r.floor_s and r.x_floor > 0
        flops[n] = {r.name.split("__")[0]: r.flops for r in matmuls}
    assert all(flops[64][name] >= 3 * flops[16][name] for name in flops[16] if name in flops[64])


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_a_suite_language_model_compiles_once_for_every_length(name):
    """BERT (position ids sliced to ``T.min(seq, 512)``) and Llama (masks sliced along
    negative axes to a symbolic end, an MLP 172 wide): one executable, parity against torch
    at odd lengths and the range's ends."""
    import tvm_ext

    model = tvm_ext.build_suite(name, "small", seq=11, max_seq=48)
    compiled = tvm_ext.compile(model)
    assert list(compiled.bounds.values()) == [(2, 48)]
    rng = np.random.default_rng(2)
    for n in (2, 5, 37, 48):
        ids = rng.integers(0, 1000, (1, n)).astype(np.int64)
        np.testing.assert_allclose(compiled.run(ids), model.reference([ids]), rtol=1e-4, atol=1e-4)


def test_slices_within_the_declared_bounds_are_rewritten_and_others_kept():
    """``relax_fixes``: a slice along a negative axis is written along its position; one to a
    symbolic end inside the input is marked ``assume_inbound`` (TOPI's guarded extent breaks
    ``FuseOps``); one the bounds cannot place inside is left as it was."""
    from tvm import relax

    from tvm_ext.model_pipeline.relax_fixes import fixed

    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((1, n + 1), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        inside = bb.emit(relax.op.strided_slice(x, (-1,), (0,), (n,)))
        unknown = bb.emit(relax.op.strided_slice(x, (1,), (0,), (n + 5,)))
        bb.emit_func_output(relax.Tuple([inside, unknown]))
    mod = bb.get()
    mod["main"] = mod["main"].with_attrs(
        {"tir_var_lower_bound": {"n": 2}, "tir_var_upper_bound": {"n": 64}}
    )
    slices = [
        v
        for _, v in tvm_api.bindings(fixed(mod)["main"])
        if tvm_api.call_name(v) == "relax.strided_slice"
    ]
    assert [str(tvm_api.tuple_values(s.args[1])) for s in slices] == ["[1]", "[1]"]
    assert [bool(s.attrs.assume_inbound) for s in slices] == [True, False]


def test_slices_from_the_end_of_a_symbolic_axis_are_written_from_its_extent():
    """``relax_fixes``: ``x[:, -1:]`` (torch's end ``2**63 - 1``) overflowed TVM's simplifier
    and ``x[:, :-1]`` lost its shape in ``LegalizeOps``; written from the extent (``n``,
    ``n + 1``) both are proven inside the input, and the module legalizes with every shape
    known."""
    from tvm import relax

    from tvm_ext.model_pipeline.relax_fixes import fixed

    n = tvm.tirx.Var("n", "int64")
    x = relax.Var("x", relax.TensorType((1, n + 1), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        last = bb.emit(relax.op.strided_slice(x, (1,), (-1,), (2**63 - 1,)))
        rest = bb.emit(relax.op.strided_slice(x, (1,), (0,), (-1,)))
        bb.emit_func_output(relax.Tuple([last, rest]))
    mod = bb.get()
    mod["main"] = mod["main"].with_attrs(
        {"tir_var_lower_bound": {"n": 1}, "tir_var_upper_bound": {"n": 64}}
    )
    out = fixed(mod)
    slices = [
        v for _, v in tvm_api.bindings(out["main"]) if tvm_api.call_name(v) == "relax.strided_slice"
    ]
    assert [str(tvm_api.tuple_values(s.args[2])) for s in slices] == ["[n]", "[0]"]
    assert [str(tvm_api.tuple_values(s.args[3])) for s in slices] == ["[n + T.int64(1)]", "[n]"]
    assert all(bool(s.attrs.assume_inbound) for s in slices)
    legal = relax.transform.LegalizeOps()(out)
    shapes = [str(v.ty) for v, _ in tvm_api.bindings(legal["main"])]
    assert not any("ndim" in shape for shape in shapes), shapes


def test_a_decode_step_matches_a_full_recompute_and_grows_its_cache_in_place():
    """Llama's decode step, compiled once for a symbolic cache length and run by a
    DecodeSession: at cache lengths the example did not have, two steps in a row match
    transformers' full recompute over prefix + tokens, the cache then matches transformers'
    own, and each step wrote one row of the session's buffer (the rows past it untouched, no
    new buffer)."""
    import tvm_ext
    from tvm_ext.workloads.decode import prefill_cache

    model = tvm_ext.build_decode("small", cache=9, max_cache=64)
    compiled = tvm_ext.compile(model)
    llama = model.torch_module.inner
    session = tvm_ext.DecodeSession(compiled)
    assert session.capacity == 65
    buffer = session._rows
    rng = np.random.default_rng(3)
    for n in (2, 30, 62):
        ids = rng.integers(0, 1000, (1, n + 2)).astype(np.int64)
        buffer[:] = np.nan  # what a step must not read, and must leave past its row
        session.prefill(prefill_cache(llama, ids[:, :n]))
        hidden = [session.step(ids[:, n + i : n + i + 1]) for i in range(2)]
        with torch.no_grad():
            full = llama(input_ids=torch.from_numpy(ids)).last_hidden_state.numpy()
        np.testing.assert_allclose(np.concatenate(hidden, 1), full[:, n:], rtol=1e-4, atol=1e-4)
        assert session.length == n + 2 and session._rows is buffer
        np.testing.assert_allclose(session.cache(), prefill_cache(llama, ids), rtol=1e-4,
                                   atol=1e-4)  # fmt: skip
        assert np.isnan(buffer[:, n + 2 :]).all()
    session.step(ids[:, :1])  # 64 cached tokens: the declared range's last step
    with pytest.raises(InputError, match="full"):
        session.step(ids[:, :1])
    longer = tvm_ext.DecodeSession(compiled, capacity=80)
    longer.prefill(np.zeros((2, 2, 70, 1, 16), np.float32))
    with pytest.raises(InputError, match="outside"):
        longer.step(ids[:, :1])


def test_the_zoo_decoder_blocks_decode_step_matches_a_full_recompute():
    """The zoo decoder block's decode step (the block's own weights), compiled once: two
    steps in a row against caches of 1, 17 and 100 tokens match the block run over prefix
    + tokens, its cache the block's keys and values; the scores are the dot rule's."""
    import tvm_ext
    from tvm_ext.workloads import models

    step = models.decoder_step("small", cache=5, max_cache=128)
    block = models.build("decoder", "small")
    assert all(np.array_equal(a, b) for a, b in zip(block.params, step.params))
    compiled = tvm_ext.compile(step)
    assert "dot" in set(compiled.applied.table()["rule"])
    weights = {k: v.astype(np.float64) for k, v in block.weights.items()}
    session = tvm_ext.DecodeSession(compiled)
    heads, hidden = models.DECODER["small"].heads, models.DECODER["small"].hidden
    rng = np.random.default_rng(0)
    for n in (1, 17, 100):
        x = rng.standard_normal((1, n + 2, hidden))
        session.prefill(models.decoder_cache(weights, x[:, :n], heads))
        out = [session.step(x[:, n + i : n + i + 1].astype(np.float32)) for i in range(2)]
        full = models.decoder_reference(weights, x, heads)[:, n:]
        np.testing.assert_allclose(np.concatenate(out, 1), full, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(session.cache(), models.decoder_cache(weights, x, heads),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip


def test_tuning_a_symbolic_model_is_refused_before_any_work(symbolic_block, tmp_path):
    """MetaSchedule tunes static shapes only: ``tune`` without ``lengths=`` names the
    symbolic dimensions and what to do instead, and writes nothing."""
    import tvm_ext
    from tvm_ext.base.errors import UnsupportedModel

    model, _ = symbolic_block
    with pytest.raises(
        UnsupportedModel, match=r"symbolic dimensions \['s\d+'\]: tune it at the lengths"
    ):
        tvm_ext.tune(model, trials=8, log_dir=str(tmp_path))
    assert not any(tmp_path.iterdir())
