"""A ``torch.nn.Module`` as a model the package compiles, tunes, replays and profiles.

:func:`from_torch` exports the module with ``torch.export`` (inference mode: ``eval()``, no
autograd), imports the program with TVM's ``from_exported_program`` (weights kept as the
entry function's last parameters, then detached as numpy arrays), and returns a
:class:`TorchModel`: a zoo :class:`~tvm_ext.workloads.model_base.Model` whose reference is the
module itself, run by torch on the same inputs. torch is optional (the ``[torch]`` extra):
imported when this is called, never at import time.

An operator TVM's importer has no converter for raises :class:`UnsupportedModel`, naming the
operators and the graph nodes that use them, before anything is built; so does a converter
that fails on the graph (a shape check inside TVM), naming the node it failed on. The graphs
TVM 0.27 is known to mis-convert are rewritten first (:mod:`~tvm_ext.workloads.export_fixes`).
"""

from __future__ import annotations

import dataclasses
import traceback
from typing import Callable, Sequence

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import UnsupportedModel
from tvm_ext.workloads import torch_libraries
from tvm_ext.workloads.export_fixes import repair_exported
from tvm_ext.workloads.model_base import Model, check_inputs, frozen


@dataclasses.dataclass(frozen=True, eq=False)
class TorchModel(Model):
    """A model imported from torch: ``reference`` runs the torch module (float32, as the
    compiled model does) and returns its output(s) as numpy arrays."""

    torch_forward: Callable[[Sequence[np.ndarray]], list[np.ndarray]] | None = None
    torch_module: object = None  # the module itself, in eval mode (for peers to run)

    def reference(self, inputs: Sequence[np.ndarray] | None = None):
        inputs = self.inputs if inputs is None else tuple(inputs)
        check_inputs(self, inputs)
        outs = self.torch_forward(inputs)
        return outs[0] if len(outs) == 1 else outs


def from_torch(
    module,
    example_inputs: Sequence,
    *,
    name: str | None = None,
    size: str = "custom",
    seed: int = 0,
    dynamic_shapes=None,
) -> TorchModel:
    """``module`` (a ``torch.nn.Module``) on ``example_inputs`` (torch tensors or numpy
    arrays) as a :class:`TorchModel`; ``name`` defaults to the module's class name.
    ``dynamic_shapes`` is passed to ``torch.export.export``. Raises UnsupportedModel when
    the importer lacks a converter for an operator of the exported graph or one fails."""
    torch = torch_libraries.torch()
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"from_torch takes a torch.nn.Module, got {type(module).__name__}")
    module = module.eval()
    args = tuple(_as_torch(torch, a) for a in example_inputs)
    with torch.no_grad():
        program = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
        program = program.run_decompositions(_decompositions(torch))
    repair_exported(torch, program)
    _refuse_unsupported(program)
    try:
        mod = tvm_api.torch_importer()(
            program,
            keep_params_as_input=True,
            run_ep_decomposition=False,
            unwrap_unit_return_tuple=True,
        )
    except _IMPORTER_FAILURES as err:
        raise _importer_failure(err) from err
    mod, detached = tvm_api.relax.frontend.detach_params(mod)
    params = tuple(frozen(w.numpy()) for w in detached.get("main", []))
    described = tvm_api.relax_params(mod["main"])
    param_names = tuple(n for n, _, _ in described[len(described) - len(params) :])
    inputs = tuple(frozen(np.array(a.detach().numpy())) for a in args)

    def torch_forward(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            out = module(*(torch.from_numpy(np.array(a)) for a in arrays))
        return [leaf.detach().numpy() for leaf in _tensor_leaves(torch, out)]

    return TorchModel(
        name or type(module).__name__,
        size,
        int(inputs[0].shape[0]) if inputs and inputs[0].ndim else 1,
        seed,
        mod,
        param_names,
        params,
        inputs,
        _flops(torch, module, args),
        None,
        torch_forward,
        module,
    )


def _decompositions(torch) -> dict:
    """torch.export's default decompositions but for ``einsum``, which TVM imports as one
    operator: decomposed, an einsum whose operands are not laid out as ``bmm`` wants (a
    decode step's keys read sequence-major from its cache) becomes a copy of each operand
    into that layout, then the ``bmm``; kept, it is one kernel reading its operands in place."""
    table = torch.export.default_decompositions()
    table.pop(torch.ops.aten.einsum.default, None)
    return table


def _as_torch(torch, value):
    if isinstance(value, torch.Tensor):
        return value
    return torch.from_numpy(np.ascontiguousarray(value))


def _tensor_leaves(torch, out) -> list:
    """The tensors of a module's output in the order the importer returns them (the pytree's
    leaves: a ModelOutput's fields, a tuple's items)."""
    leaves = torch.utils._pytree.tree_leaves(out)
    return [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]


def _flops(torch, module, args) -> int:
    """2 x the multiply-adds of the matmuls, convolutions and attention products, as torch's
    FLOP counter counts them (elementwise work left out, as the zoo's figures do)."""
    from torch.utils.flop_counter import FlopCounterMode  # lazy: torch is optional

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        module(*args)
    return int(counter.get_total_flops())


# What a converter of TVM's importer raises on a graph it mis-converts (its shape checks are
# ValueErrors, TVM's own checks RuntimeErrors): funnel's and ConvBERT's (transformers) imports
# failed so, from inside the converter of one node.
_IMPORTER_FAILURES = (ValueError, TypeError, RuntimeError, AssertionError, KeyError, IndexError)


def _importer_failure(err: Exception) -> UnsupportedModel:
    """``err``, raised inside TVM's importer, as an UnsupportedModel naming the graph node
    whose converter raised it (the innermost frame of the traceback holding a ``node``)."""
    node = None
    for frame, _ in traceback.walk_tb(err.__traceback__):
        candidate = frame.f_locals.get("node")
        if hasattr(candidate, "op") and hasattr(candidate, "target"):
            node = candidate
    first = (str(err).strip().splitlines() or [""])[0]
    if node is None:
        where, operators = "", {}
    else:
        op = getattr(node.target, "__name__", str(node.target))
        where, operators = f" converting node {node.name} ({op})", {op: [node.name]}
    return UnsupportedModel(
        f"TVM {tvm_api.TVM_VERSION}'s torch importer failed{where}: {type(err).__name__}: {first}",
        operators=operators,
    )


def _refuse_unsupported(program) -> None:
    supported = tvm_api.torch_converters()
    missing: dict[str, list[str]] = {}
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target.__name__ not in supported:
            missing.setdefault(node.target.__name__, []).append(node.name)
    if missing:
        listed = "; ".join(
            f"{op} (node{'s' if len(nodes) > 1 else ''} {', '.join(nodes[:5])}"
            f"{', ...' if len(nodes) > 5 else ''})"
            for op, nodes in sorted(missing.items())
        )
        raise UnsupportedModel(
            f"TVM {tvm_api.TVM_VERSION}'s torch importer has no converter for: {listed}",
            operators=missing,
        )


__all__ = ["TorchModel", "from_torch"]
