"""What a zoo model is: a Relax module, its seeded weights and inputs, and a numpy reference.

A :class:`Model` is to a network what a :class:`~tvm_ext.workloads.kernels.Workload` is to a
kernel: *what* to compute. Its module comes from ``tvm.relax.frontend.nn``'s ``export_tvm``
(one function, ``forward``, taking the inputs and then the weights); its weights are drawn from
an explicit seed, never downloaded; its reference runs the same weights through numpy alone
(in float64, so the reference is not the thing being tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import bind_symbolic

ENTRY = "forward"
SIZES = ("full", "small")
# A numpy forward pass: (weights by their spec name, inputs) -> the output.
NumpyForward = Callable[[dict[str, np.ndarray], Sequence[np.ndarray]], np.ndarray]


@dataclass(frozen=True, eq=False)  # eq=False: numpy arrays have no truth value to compare by
class Model:
    """A network to compile: its Relax module, seeded weights and inputs, numpy reference.

    ``mod``'s ``forward`` takes ``inputs`` then ``params`` (in ``param_names`` order, the order
    of ``export_tvm``'s spec). Arrays are read-only. ``flops`` counts the multiply-adds of the
    matmuls, convolutions and attention products (2 per multiply-add); elementwise work and
    normalizations are left out, so it is an estimate from below.
    """

    name: str
    size: str
    batch: int
    seed: int
    mod: "tvm_api.IRModule"
    param_names: tuple[str, ...]
    params: tuple[np.ndarray, ...]
    inputs: tuple[np.ndarray, ...]
    flops: int
    forward_np: NumpyForward

    @property
    def weights(self) -> dict[str, np.ndarray]:
        """The weights by their spec name (``fc1.weight``, ...)."""
        return dict(zip(self.param_names, self.params))

    @property
    def input_specs(self) -> tuple[tuple[tuple[int | str | None, ...], str], ...]:
        """(shape, dtype) of each input, in order, as the module declares it: a symbolic
        dimension is its variable's name (None for an expression), other dimensions those of
        the model's own inputs."""
        declared = tvm_api.relax_params(self.mod[tvm_api.relax_entry(self.mod)])
        specs = []
        for array, (_, dims, _) in zip(self.inputs, declared):
            if len(dims) != array.ndim:  # not the module's own parameter: the array decides
                dims = array.shape
            shape = tuple(d if not isinstance(d, int) else n for d, n in zip(dims, array.shape))
            specs.append((shape, str(array.dtype)))
        return tuple(specs)

    @property
    def bounds(self) -> dict:
        """{symbolic dimension: (lowest, highest)} the module declares (None where not)."""
        return tvm_api.symbolic_bounds(self.mod[tvm_api.relax_entry(self.mod)])

    @property
    def key(self) -> str:
        """A short name for tables: ``encoder/full/b2``."""
        return f"{self.name}/{self.size}/b{self.batch}"

    def reference(self, inputs: Sequence[np.ndarray] | None = None):
        """The output (a list of them for a model of several) of numpy alone on ``inputs``
        (default the model's own), as float32."""
        inputs = self.inputs if inputs is None else tuple(inputs)
        check_inputs(self, inputs)
        wide = [np.asarray(a, dtype=np.float64) for a in inputs]
        out = self.forward_np({k: v.astype(np.float64) for k, v in self.weights.items()}, wide)
        if isinstance(out, (list, tuple)):  # a model of several outputs
            return [np.asarray(o, dtype=np.float32) for o in out]
        return np.asarray(out, dtype=np.float32)


def check_inputs(model: Model, inputs: Sequence[np.ndarray]) -> None:
    """Raise ValueError, showing both, when ``inputs`` do not match the model's inputs: their
    number, ranks, dtypes and fixed dimensions; a symbolic dimension takes any length within
    its bounds, the same in every input that names it (InputError, a ValueError, otherwise)."""
    specs = model.input_specs
    got = tuple((tuple(np.shape(a)), str(np.asarray(a).dtype)) for a in inputs)
    fits = len(got) == len(specs) and all(
        dtype == want_dtype
        and len(shape) == len(dims)
        and all(not isinstance(d, int) or d == n for d, n in zip(dims, shape))
        for (shape, dtype), (dims, want_dtype) in zip(got, specs)
    )
    if not fits:
        raise ValueError(f"{model.key} takes inputs {list(specs)}, got {list(got)}")
    names = [f"#{i}" for i in range(len(specs))]
    bind_symbolic(model.key, names, [d for d, _ in specs], [s for s, _ in got], model.bounds)


def check_size(size: str, batch: int) -> None:
    """Validate a builder's ``size`` and ``batch`` before anything is built."""
    if size not in SIZES:
        raise ValueError(f"{size=} must be one of {SIZES}")
    if int(batch) != batch or batch < 1:
        raise ValueError(f"{batch=} must be a positive integer")


def make_model(
    name: str,
    size: str,
    batch: int,
    seed: int,
    module,
    input_shapes: dict[str, tuple[int | str, ...]],
    flops: int,
    forward_np: NumpyForward,
    inputs: Sequence[np.ndarray] | None = None,
) -> Model:
    """Export ``module`` (a ``relax_nn.Module``) and draw its weights and inputs from ``seed``.

    Weights and inputs come from separate streams of the seed, so the weights do not change
    with the batch: ``mlp`` at batch 1 and at batch 4 is the same network, and a module with
    the same layers draws the same weights. A dimension named by a string is symbolic; such a
    model takes its example ``inputs``.
    """
    spec = {ENTRY: {k: tvm_api.relax_nn.spec.Tensor(s, "float32") for k, s in input_shapes.items()}}
    mod, named = module.export_tvm(spec)
    weight_rng = np.random.default_rng([seed, 0])
    params = tuple(
        frozen(init_weight(n, tuple(int(d) for d in p.shape), weight_rng)) for n, p in named
    )
    if inputs is None:
        input_rng = np.random.default_rng([seed, 1, batch])
        inputs = [input_rng.standard_normal(s).astype(np.float32) for s in input_shapes.values()]
    inputs = tuple(frozen(np.asarray(a, np.float32)) for a in inputs)
    return Model(
        name,
        size,
        batch,
        seed,
        mod,
        tuple(n for n, _ in named),
        params,
        inputs,
        int(flops),
        forward_np,
    )


def init_weight(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A weight drawn so activations stay near unit scale, whatever the depth.

    Norm scales near 1, biases small, matrices and kernels with He-like scaling
    (1/sqrt(fan-in)): outputs of order 1 keep the parity check's relative error meaningful.
    """
    if len(shape) == 1:
        centre = 1.0 if "norm" in name else 0.0
        return (centre + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    fan_in = math.prod(shape[1:])
    return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)


def frozen(array: np.ndarray) -> np.ndarray:
    """``array``, made read-only (a model's weights and inputs are)."""
    array.setflags(write=False)
    return array


# -- numpy pieces of the references (float64 in, float64 out) ------------------------------


def linear(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    """``x @ W.T + b`` for the Linear layer ``name`` (no bias when it has none)."""
    y = x @ w[f"{name}.weight"].T
    bias = w.get(f"{name}.bias")
    return y if bias is None else y + bias


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, w: dict[str, np.ndarray], name: str, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w[f"{name}.weight"] + w[f"{name}.bias"]


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def gelu(x: np.ndarray) -> np.ndarray:
    """The exact (erf) GELU, as BERT and ``relax_nn.op.gelu`` compute it."""
    from scipy.special import erf  # lazy: only references need it

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def conv2d_3x3(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """NCHW 3x3 convolution, stride 1, zero padding 1, plus a per-channel bias."""
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    # windows: (n, c, h, w, kh, kw); contract c, kh, kw with the weight's (o, c, kh, kw)
    out = np.tensordot(windows, weight, axes=([1, 4, 5], [1, 2, 3]))  # (n, h, w, o)
    return out.transpose(0, 3, 1, 2) + bias[None, :, None, None]
