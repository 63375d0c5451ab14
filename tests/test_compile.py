"""tvm_ext.compile: weights folded, every kernel scheduled by a rule, parity before time."""

from __future__ import annotations

import numpy as np
import pytest

import tvm_ext
from tvm_ext import models
from tvm_ext.base import tvm_api
from tvm_ext.model_pipeline.compile import compile_untuned

NAMES = sorted(models.ZOO)


@pytest.fixture(scope="module")
def small_mlp():
    return models.build("mlp", "small", batch=2)


@pytest.fixture(scope="module")
def compiled_mlp(small_mlp, host):
    return tvm_ext.compile(small_mlp, host)


@pytest.mark.parametrize("name", NAMES)
def test_compile_matches_the_reference_and_the_table_covers_every_kernel(name, host):
    model = models.build(name, "small", batch=2)
    compiled = tvm_ext.compile(model, host)  # raises ParityError past tolerance
    assert compiled.checked and compiled.path == "ours"
    max_abs, max_rel = compiled.check()
    assert max_rel <= 1e-4
    prim_funcs = {
        gv.name_hint
        for gv, f in compiled.applied.mod.functions.items()
        if isinstance(f, tvm_api.PrimFunc)
    }
    table = compiled.applied.table()
    assert set(table["name"]) == prim_funcs
    # A kernel whose weights the rules repacked is called as <name>_prepacked; the repacking
    # itself ran at compile time and is never called.
    assert {k.removesuffix("_prepacked") for k in compiled.kernels} <= prim_funcs
    assert not any(k.endswith("_weight_prepack") for k in compiled.kernels)
    assert table["rule"].notna().all()
    assert abs(table["share"].sum() - 1.0) < 1e-9 or table["flops"].sum() == 0


def test_mlp_weights_are_transposed_at_compile_time_not_per_call(compiled_mlp, small_mlp, host):
    # The stock path transposes each Linear weight on every call; ours folds that away.
    untuned = compile_untuned(small_mlp, host)
    assert any("transpose" in k for k in untuned.kernels)
    assert compiled_mlp.kernels and not any("transpose" in k for k in compiled_mlp.kernels)
    names = [gv.name_hint for gv in compiled_mlp.applied.mod.functions]
    assert not any("transpose" in n for n in names)


def test_wrong_input_shape_is_a_value_error_naming_both(compiled_mlp):
    with pytest.raises(ValueError, match=r"\(2, 64\).*\(3, 64\)"):
        compiled_mlp.run(np.zeros((3, 64), np.float32))
    with pytest.raises(ValueError, match="float64"):
        compiled_mlp.run(np.zeros((2, 64), np.float64))
    with pytest.raises(ValueError):
        compiled_mlp.time([np.zeros((2, 63), np.float32)], repeat=1)


def test_a_wrong_reference_raises_parity_error_before_any_time(small_mlp, host):
    def wrong(inputs):
        return small_mlp.reference(inputs) + 1.0

    params = list(small_mlp.params)
    with pytest.raises(tvm_ext.ParityError):
        tvm_ext.compile(small_mlp.mod, host, params, reference=wrong, inputs=small_mlp.inputs)
    # without inputs the check waits for the first time(), which raises instead of timing
    compiled = tvm_ext.compile(small_mlp.mod, host, params, reference=wrong)
    assert not compiled.checked
    with pytest.raises(tvm_ext.ParityError):
        compiled.time(small_mlp.inputs, repeat=1)


def test_a_relax_module_with_weights_by_name(small_mlp, host):
    params = {name: w for name, w in small_mlp.weights.items()}
    compiled = tvm_ext.compile(
        small_mlp.mod, host, params, reference=small_mlp.reference, inputs=small_mlp.inputs
    )
    assert compiled.checked and compiled.input_specs == (((2, 64), "float32"),)
    with pytest.raises(ValueError, match="no parameters"):
        tvm_ext.compile(small_mlp.mod, host, {"fc9.weight": params["fc1.weight"]})


def test_a_zoo_model_takes_no_extra_weights(small_mlp, host):
    with pytest.raises(ValueError, match="carries its params"):
        tvm_ext.compile(small_mlp, host, list(small_mlp.params))


def test_time_reports_a_positive_latency_on_the_targets_cores(compiled_mlp, host):
    timing = compiled_mlp.time(repeat=2, min_repeat_ms=1)
    assert timing.seconds > 0 and timing.min_seconds <= timing.seconds
    assert timing.repeats == 2 and timing.threads == host.attrs["num-cores"]
    assert timing.gflops > 0
    with pytest.raises(ValueError):
        compiled_mlp.time(repeat=0)


def test_cuda_targets_are_refused(small_mlp):
    with pytest.raises(ValueError, match="llvm"):
        tvm_ext.compile(small_mlp, tvm_ext.cuda_target("sm_90"))
