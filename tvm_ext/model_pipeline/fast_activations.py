"""Element-wise math a model holds, written as vector arithmetic before ``lower`` legalizes it.

- **GELU** (its erf and tanh forms) and the **sigmoid** are written with ``erf``/``tanh``/
  ``exp``, which ``lower``'s ``FastMathTransform`` turns into polynomials the rules vectorize;
  legalized as they are, they call libm's scalar ``erf``/``tanh``/``expf`` per element (BERT's
  GELU at 16 x 3072 took 291 us, about 6 ns an element).
- **SiLU** (``x * sigmoid(x)``, as torch exports ``nn.SiLU``, becomes Relax's ``nn.silu``)
  is legalized as one block with onnxruntime's logistic (MLAS's, behind its ``Sigmoid`` and
  ``QuickGelu``): a rational function of ``x`` clamped to [-18, 18], 15 vector operations and
  a division where the ``exp`` form takes 22 and a division. As the epilogue of a convolution
  of few input channels the activation is most of the work: a 1x1 convolution 16 -> 96
  channels on a 112 x 112 map (efficientnet's expand) took 671 us with the ``exp`` form, 497
  us with this one, 217 us with its bias alone (Zen 3, AVX2, 2 threads, interleaved). Its
  error is absolute (under 2.3e-7 on the sigmoid, so under ``2.3e-7 |x|`` on SiLU), not
  relative: far in the negative tail (x < -10) the sigmoid's few significant digits are
  lost, which a SiLU (a value near 0 there) does not show and a bare sigmoid (a probability,
  a log taken of it) could; the bare sigmoid keeps the ``exp`` form.
- ``power`` with a constant exponent (``powf`` per element): squares, cubes and fourth powers
  are written as products, ``x ** 0.5`` as ``sqrt``.
"""

from __future__ import annotations

from tvm_ext.base import tvm_api

# MLAS's logistic (onnxruntime/core/mlas/lib/logistic.cpp): sigmoid(x) = p(x) / q(x) + 1/2
# on x clamped to [-LOGISTIC_RANGE, LOGISTIC_RANGE], p odd of degree 9 and q even of degree
# 10 (coefficients of x^9 .. x^1 and x^10 .. x^0), the result clamped to [0, 1].
LOGISTIC_RANGE = 18.0
LOGISTIC_P = (
    4.37031012579801e-11,
    1.15627324459942e-07,
    6.08574864600143e-05,
    8.51377133304701e-03,
    2.48287947061529e-01,
)
LOGISTIC_Q = (
    6.10247389755681e-13,
    5.76102136993427e-09,
    6.29106785017040e-06,
    1.70198817374094e-03,
    1.16817656904453e-01,
    9.93151921023180e-01,
)


def activations_as_fast_math(mod):
    """``mod`` with a float32 ``x * sigmoid(x)`` written as ``nn.silu(x)`` (which ``lower``
    legalizes with :data:`LEGALIZE`), and ``gelu``, ``gelu_tanh`` and ``sigmoid`` as the
    elementwise arithmetic they are around ``erf``, ``tanh`` and ``exp`` (the ops
    ``FastMathTransform`` replaces by polynomials): ``x (1/2 + erf(x / sqrt 2) / 2)``,
    ``x (1/2 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)) / 2)`` and ``1 / (1 + exp(-x))``. (A
    sigmoid only a SiLU used is left dead: ``lower`` removes it.)"""
    mod = tvm_api.rewrite_calls(mod, _silu, with_bindings=True)
    return tvm_api.rewrite_calls(mod, _activation)


def _silu(call, value_of):
    """``nn.silu(x)`` for a float32 ``multiply`` of ``x`` and ``sigmoid(x)`` (either
    order); None for any other call."""
    if tvm_api.call_name(call) != "relax.multiply":
        return None
    a, b = call.args
    x = next((u for u, v in ((a, b), (b, a)) if _is_sigmoid_of(value_of(v), u)), None)
    if x is None or tvm_api.tensor_dtype(x) != "float32":
        return None
    return tvm_api.relax.op.nn.silu(x)


def _is_sigmoid_of(value, x) -> bool:
    return (
        isinstance(value, tvm_api.relax.Call)
        and tvm_api.call_name(value) == "relax.sigmoid"
        and value.args[0].same_as(x)
    )


def silu_legalized(bb, call):
    """``nn.silu`` legalized as one element-wise block, ``x * logistic(x)`` in float32 (one
    block the rules fuse into a convolution's write-back, named ``silu``); TVM's own
    legalization (``x * sigmoid(x)``, libm's ``expf`` per element) for any other dtype."""
    x = call.args[0]
    if tvm_api.tensor_dtype(x) != "float32":
        return tvm_api.ir.Op.get("relax.nn.silu").get_attr("FLegalize")(bb, call)

    def silu(t):
        return tvm_api.te.compute(t.shape, lambda *i: t(*i) * logistic(t(*i)), name="silu")

    return bb.call_te(silu, x, primfunc_name_hint="silu")


def logistic(x):
    """The sigmoid of a float32 TIR expression ``x`` as MLAS computes it (LOGISTIC_P)."""
    te = tvm_api.te

    def horner(coefficients, at):
        value = coefficients[0]
        for coefficient in coefficients[1:]:
            value = value * at + coefficient
        return value

    clamped = te.max(te.min(x, LOGISTIC_RANGE), -LOGISTIC_RANGE)
    square = clamped * clamped
    ratio = horner(LOGISTIC_P, square) * clamped / horner(LOGISTIC_Q, square)
    return te.min(te.max(ratio + 0.5, 0.0), 1.0)


# The legalizations ``lower`` overrides (LegalizeOps' customize_legalize_map).
LEGALIZE = {"relax.nn.silu": silu_legalized}


def _activation(call):
    name = tvm_api.call_name(call)
    if name == "relax.power":
        return _power_as_products(call)
    if name not in ("relax.nn.gelu", "relax.nn.gelu_tanh", "relax.sigmoid"):
        return None
    dtype = tvm_api.tensor_dtype(call.args[0])
    if not dtype.startswith("float"):
        return None
    op, x = tvm_api.relax.op, call.args[0]

    def c(value):
        return tvm_api.relax.const(value, dtype)

    if name == "relax.sigmoid":
        return op.divide(c(1.0), op.add(c(1.0), op.exp(op.negative(x))))
    if name == "relax.nn.gelu":
        inner = op.erf(op.multiply(x, c(0.7071067811865476)))
    else:
        cubic = op.add(x, op.multiply(c(0.044715), op.multiply(x, op.multiply(x, x))))
        inner = op.tanh(op.multiply(c(0.7978845608028654), cubic))
    return op.multiply(x, op.add(c(0.5), op.multiply(inner, c(0.5))))


def _power_as_products(call):
    """``x ** 2``, ``x ** 3`` and ``x ** 4`` (RMSNorm's square, GPT-2's tanh-GELU cube) as
    products, ``x ** 0.5`` as ``sqrt``: legalized, ``power`` calls libm's scalar ``powf`` per
    element (GPT-2's GELU at 128 x 3072 ran at 25 GFLOP/s, 16x its floor)."""
    x, exponent = call.args
    dtype = tvm_api.tensor_dtype(x)
    value = tvm_api.constant_values(exponent)
    if not dtype.startswith("float") or value is None or value.size != 1:
        return None
    value, op = float(value.reshape(())), tvm_api.relax.op
    if value == 0.5:
        return op.sqrt(x)
    if value in (2.0, 3.0, 4.0):
        square = op.multiply(x, x)
        return {2.0: square, 3.0: op.multiply(square, x), 4.0: op.multiply(square, square)}[value]
    return None


__all__ = [
    "LEGALIZE",
    "LOGISTIC_P",
    "LOGISTIC_Q",
    "LOGISTIC_RANGE",
    "activations_as_fast_math",
    "logistic",
    "silu_legalized",
]
