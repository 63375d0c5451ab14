"""A small embedding model for the boundary tests, and the cases that could crash the process
if an index reached a kernel unchecked: ``python boundary_cases.py CASE`` runs one in a process
of its own and prints one JSON line (a crash is then a non-zero exit, not a dead test session).
"""

from __future__ import annotations

import json
import sys

import numpy as np

VOCAB, DIM, SEQ, POSITIONS = 100, 16, 8, 32


def embedding_model():
    """``scale * word[ids] + pos[positions]``: ids (1, SEQ) int64 reshaped before the lookup,
    positions (SEQ,) int32 cast to int64 (both value-keeping), scale a float input."""
    from tvm_ext.base import tvm_api

    relax = tvm_api.relax
    bb = relax.BlockBuilder()
    ids = relax.Var("input_ids", relax.TensorType((1, SEQ), "int64"))
    positions = relax.Var("positions", relax.TensorType((SEQ,), "int32"))
    scale = relax.Var("scale", relax.TensorType((SEQ, DIM), "float32"))
    word = relax.Var("word_embeddings", relax.TensorType((VOCAB, DIM), "float32"))
    pos = relax.Var("position_embeddings", relax.TensorType((POSITIONS, DIM), "float32"))
    with bb.function("main", [ids, positions, scale, word, pos]):
        with bb.dataflow():
            flat = bb.emit(relax.op.reshape(ids, (SEQ,)))
            words = bb.emit(relax.op.take(word, flat, axis=0))  # the importer's mode="fast"
            where = bb.emit(relax.op.take(pos, relax.op.astype(positions, "int64"), axis=0))
            out = bb.emit_output(relax.op.add(relax.op.multiply(scale, words), where))
        bb.emit_func_output(out)
    return bb.get()


def weights():
    rng = np.random.default_rng(0)
    return (
        rng.standard_normal((VOCAB, DIM)).astype("float32"),
        rng.standard_normal((POSITIONS, DIM)).astype("float32"),
    )


def reference(inputs):
    word, pos = weights()
    ids, positions, scale = inputs
    return scale * word[ids.reshape(-1)] + pos[positions]


def good_inputs():
    rng = np.random.default_rng(1)
    return [
        rng.integers(0, VOCAB, (1, SEQ)).astype("int64"),
        np.arange(SEQ, dtype="int32"),
        rng.standard_normal((SEQ, DIM)).astype("float32"),
    ]


def compiled(untuned: bool = False):
    from tvm_ext.model_pipeline.compile import compile, compile_untuned

    make = compile_untuned if untuned else compile
    return make(embedding_model(), params=list(weights()), reference=reference,
                inputs=good_inputs())  # fmt: skip


def raw_call(model, inputs):
    """The VM entry called directly, past the boundary checks."""
    from tvm_ext.base import tvm_api

    dev = tvm_api.cpu(0)
    args = [tvm_api.tensor(np.ascontiguousarray(a), dev) for a in inputs] + list(model.weights)
    return model.vm[model.entry](*args).numpy()


def clamped_reference(inputs):
    """What the guarded kernels compute on any ids: each index clamped into its table."""
    ids, positions, scale = inputs
    return reference([np.clip(ids, 0, VOCAB - 1), np.clip(positions, 0, POSITIONS - 1), scale])


def bad_ids(model) -> dict:
    """Out-of-range and negative ids through every entry of the boundary, then straight into
    the VM: each boundary call must raise InputError, the VM call must return clamped rows."""
    from tvm_ext.base.errors import InputError

    out = {}
    for label, value in (("huge", 10_000_000), ("vocab", VOCAB), ("negative", -1),
                         ("most negative", np.iinfo(np.int64).min)):  # fmt: skip
        inputs = good_inputs()
        inputs[0][0, 3] = value
        raised = {}
        for entry, call in (
            ("run", lambda: model.run(*inputs)),
            ("check", lambda: model.check(inputs)),
            ("time", lambda: model.time(inputs, repeat=1, min_repeat_ms=0)),
        ):
            try:
                call()
                raised[entry] = None
            except InputError as err:
                raised[entry] = {"message": str(err), "position": list(err.position),
                                 "value": int(err.value), "valid": list(err.valid)}  # fmt: skip
        direct = raw_call(model, inputs)
        raised["vm_matches_clamped"] = bool(np.allclose(direct, clamped_reference(inputs)))
        out[label] = raised
    return out


def random_ids(model, examples: int) -> dict:
    """Hypothesis over ids anywhere in int64: every call gives the reference's result or
    InputError, and the VM called directly gives the clamped reference; never a crash."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra.numpy import arrays

    from tvm_ext.base.errors import InputError

    seen = {"results": 0, "errors": 0}
    info = np.iinfo(np.int64)
    values = st.one_of(st.integers(0, VOCAB - 1), st.integers(info.min, info.max),
                       st.sampled_from([-1, VOCAB, VOCAB - 1, 0, info.min, info.max]))  # fmt: skip

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(ids=arrays(np.int64, (1, SEQ), elements=values),
           positions=arrays(np.int32, (SEQ,), elements=st.integers(-40, 40)))  # fmt: skip
    def one(ids, positions):
        inputs = [ids, positions, good_inputs()[2]]
        valid = (0 <= ids).all() and (ids < VOCAB).all()
        valid = valid and (0 <= positions).all() and (positions < POSITIONS).all()
        try:
            got = model.run(*inputs)
        except InputError:
            assert not valid, "a valid input was refused"
            seen["errors"] += 1
        else:
            assert valid, "an out-of-range index passed the boundary"
            np.testing.assert_allclose(got, reference(inputs), rtol=1e-5, atol=1e-5)
            seen["results"] += 1
        np.testing.assert_allclose(raw_call(model, inputs), clamped_reference(inputs), rtol=1e-5,
                                   atol=1e-5)  # fmt: skip

    one()
    return seen


def main(case: str) -> None:
    if case == "bad_ids":
        result = {path: bad_ids(compiled(path == "untuned")) for path in ("ours", "untuned")}
    elif case == "random_ids":
        result = random_ids(compiled(), examples=int(sys.argv[2]))
    else:
        raise SystemExit(f"unknown case {case!r}")
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
