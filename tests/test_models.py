"""The model zoo: seeded, immutable models whose stock TVM build matches the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from tvm_ext import models
from tvm_ext.model_pipeline.compile import compile_untuned

NAMES = sorted(models.ZOO)


def test_the_zoo_holds_the_four_models():
    assert NAMES == ["decoder", "encoder", "mlp", "resnet"]


@pytest.mark.parametrize("name", NAMES)
def test_untuned_build_matches_the_numpy_reference(name, host):
    model = models.build(name, "small", batch=2)
    compiled = compile_untuned(model, host)  # raises ParityError past tolerance
    assert compiled.checked
    out = compiled.run(*model.inputs)
    ref = model.reference()
    assert out.shape == ref.shape
    scale = np.abs(ref).mean()
    assert scale > 0.1, "outputs near zero would make the parity check vacuous"
    np.testing.assert_allclose(out, ref, rtol=0, atol=1e-4 * scale)


@pytest.mark.parametrize("name", NAMES)
def test_models_are_seeded_and_the_batch_leaves_the_weights(name):
    a, b = models.build(name, "small", batch=1), models.build(name, "small", batch=1)
    wide = models.build(name, "small", batch=3)
    other = models.build(name, "small", batch=1, seed=1)
    for x, y, z in zip(a.params, b.params, wide.params):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    assert not all(np.array_equal(x, y) for x, y in zip(a.params, other.params))
    np.testing.assert_array_equal(a.inputs[0], b.inputs[0])
    assert wide.inputs[0].shape[0] == 3 and wide.reference().shape[0] == 3
    assert len(a.param_names) == len(a.params) == len(a.mod["forward"].params) - 1


def test_model_arrays_are_read_only():
    model = models.build("mlp", "small")
    with pytest.raises(ValueError):
        model.params[0][0, 0] = 1.0
    with pytest.raises(ValueError):
        model.inputs[0][0, 0] = 1.0


def test_flops_follow_the_shapes():
    mlp = models.build("mlp", "full", batch=2)
    assert mlp.flops == 2 * 2 * (784 * 256 + 256 * 10)
    # the module's forward takes the input first, then one parameter per weight
    assert len(mlp.mod["forward"].params) == 1 + len(mlp.params)
    assert mlp.param_names == ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")


def test_reference_refuses_inputs_of_another_shape():
    model = models.build("encoder", "small")
    with pytest.raises(ValueError, match=r"\(1, 16, 64\).*\(1, 16, 32\)"):
        model.reference([np.zeros((1, 16, 32), np.float32)])


@pytest.mark.parametrize(
    "kwargs", [{"size": "huge"}, {"batch": 0}, {"batch": 1.5}], ids=["size", "batch0", "batch1.5"]
)
def test_bad_sizes_are_refused(kwargs):
    with pytest.raises(ValueError):
        models.build("mlp", **kwargs)


def test_unknown_model_names_the_zoo():
    with pytest.raises(ValueError, match="mlp"):
        models.build("gpt5")
