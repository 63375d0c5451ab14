"""The cost-policy contract: two hooks, a validated path, hard constraints apart from scores.

A policy implements ``coefficients(limits, basis, prior)`` (the numbers it prices with, from
the machine's limits) and ``cost(candidate, coefficients) -> Cost``. Everything calls a policy
through :func:`evaluate`, which derives the candidate's features, checks hard constraints
(no score waives them), and validates every number the policy returns: NaN, infinity,
negative values or invalid coefficients raise :class:`~tvm_ext.base.errors.PolicyError` naming the
policy. A subclass may override either hook alone.
"""

from __future__ import annotations

import json
import math
import pathlib
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from tvm_ext.base.errors import ModelFileError, PolicyError
from tvm_ext.hardware.machine import host_machine
from tvm_ext.hardware.machine_model import MachineModel
from tvm_ext.hardware.target import as_target, host_target

from .features import CandidateFeatures, features

# Static shared memory per CUDA thread block without opting in to the dynamic carve-out.
CUDA_STATIC_SHARED_BYTES = 48 * 1024


@dataclass(frozen=True)
class Cost:
    """What a policy says about one candidate.

    ``score_s`` ranks (lower is better); ``lower_bound_s`` is set only when the policy can
    prove no run is faster; ``binding`` names the arm that sets the bound (or the score);
    ``arms`` holds every arm's value in seconds; ``violations`` lists broken hard constraints.
    """

    score_s: float
    lower_bound_s: float | None
    binding: str
    arms: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    violations: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool:
        return not self.violations

    def envelope_fraction(self, measured_s: float) -> float | None:
        """How close a measured run came to the bound (1.0 = at the bound)."""
        return None if self.lower_bound_s is None else self.lower_bound_s / measured_s


class ExecutionCostPolicy:
    """Base class of cost policies; override ``coefficients`` and/or ``cost``."""

    name = "policy"
    #: Whether ``cost`` may return a ``lower_bound_s`` (only such policies may prune).
    proves_bounds = False

    def coefficients(
        self, limits: MachineModel, basis: Sequence[str], prior: Mapping[str, float] | None
    ) -> Mapping[str, float]:
        """Seconds per unit of each name in ``basis`` on a machine with ``limits``."""
        raise NotImplementedError(f"{type(self).__name__} must implement coefficients()")

    def cost(self, candidate: CandidateFeatures, coefficients: Mapping[str, float]) -> Cost:
        """The cost of ``candidate`` priced with ``coefficients``."""
        raise NotImplementedError(f"{type(self).__name__} must implement cost()")

    #: The units ``cost`` prices; ``coefficients`` must return one finite value >= 0 for each.
    basis: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def read_policy_file(path, kind: str, schema: int, required=()) -> dict:
    """The JSON of a saved profile or model, checked for its ``kind``, ``schema`` and
    ``required`` keys; anything else is a :class:`~tvm_ext.base.errors.ModelFileError` naming it."""

    path = pathlib.Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelFileError(f"{path}: cannot read a {kind}: {err}") from err
    if not isinstance(data, dict) or data.get("kind") != f"tvm_ext.{kind}":
        raise ModelFileError(f"{path}: not a tvm_ext {kind}")
    if data.get("schema") != schema:
        raise ModelFileError(f"{path}: {kind} schema {data.get('schema')!r}, expected {schema}")
    absent = sorted(set(required) - set(data))
    if absent:
        raise ModelFileError(f"{path}: {kind} lacks {', '.join(absent)}")
    return data


def _label(policy) -> str:
    return f"{type(policy).__name__}({getattr(policy, 'name', '?')})"


def _check_number(policy, what: str, value, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or math.isnan(value)
        or math.isinf(value)
        or value < 0
    ):
        raise PolicyError(
            f"{_label(policy)} returned {what}={value!r}: must be a finite number >= 0",
            policy=_label(policy),
        )


def validated_coefficients(
    policy, limits: MachineModel, prior: Mapping[str, float] | None = None
) -> Mapping[str, float]:
    """Call ``policy.coefficients`` and check every basis unit got a finite value >= 0."""
    try:
        coeffs = policy.coefficients(limits, tuple(policy.basis), prior)
    except PolicyError:
        raise
    except Exception as err:  # a user's policy failing is reported as its own error
        raise PolicyError(
            f"{_label(policy)}.coefficients failed: {err!r}", policy=_label(policy)
        ) from err
    if not isinstance(coeffs, Mapping):
        raise PolicyError(
            f"{_label(policy)}.coefficients returned {type(coeffs).__name__}, not a mapping",
            policy=_label(policy),
        )
    for unit in policy.basis:
        if unit not in coeffs:
            raise PolicyError(
                f"{_label(policy)}.coefficients gave no value for {unit!r}", policy=_label(policy)
            )
        _check_number(policy, f"coefficient {unit}", coeffs[unit])
    return MappingProxyType(dict(coeffs))


def hard_constraints(candidate: CandidateFeatures, target) -> tuple[str, ...]:
    """Resource and legality limits broken by ``candidate`` (checked apart from any score)."""
    broken = []
    if candidate.target_kind == "cuda":
        limit = int(target.attrs["max_num_threads"])
        if candidate.threads_per_block is not None and candidate.threads_per_block > limit:
            broken.append(f"{candidate.threads_per_block} threads per block > {limit}")
        if candidate.shared_bytes is not None and candidate.shared_bytes > CUDA_STATIC_SHARED_BYTES:
            broken.append(
                f"{candidate.shared_bytes} B of shared memory > {CUDA_STATIC_SHARED_BYTES}"
            )
    return tuple(broken)


def validated_cost(
    policy,
    candidate: CandidateFeatures,
    coeffs: Mapping[str, float],
    violations: tuple[str, ...] = (),
) -> Cost:
    """Call ``policy.cost`` and validate what it returns; attach hard-constraint violations."""
    try:
        cost = policy.cost(candidate, coeffs)
    except PolicyError:
        raise
    except Exception as err:  # noqa: BLE001  reported, with the policy's name, never swallowed
        raise PolicyError(f"{_label(policy)}.cost failed: {err!r}", policy=_label(policy)) from err
    if not isinstance(cost, Cost):
        raise PolicyError(
            f"{_label(policy)}.cost returned {type(cost).__name__}, not a Cost",
            policy=_label(policy),
        )
    _check_number(policy, "score_s", cost.score_s)
    _check_number(policy, "lower_bound_s", cost.lower_bound_s, allow_none=True)
    for arm, value in cost.arms.items():
        _check_number(policy, f"arm {arm}", value)
    if cost.lower_bound_s is not None and not getattr(policy, "proves_bounds", False):
        raise PolicyError(
            f"{_label(policy)} returned a lower bound but does not declare "
            "proves_bounds: only a proven bound may prune",
            policy=_label(policy),
        )
    if violations:
        cost = Cost(
            cost.score_s,
            cost.lower_bound_s,
            cost.binding,
            cost.arms,
            tuple(cost.violations) + violations,
        )
    return cost


def evaluate(
    policy,
    obj,
    target=None,
    *,
    machine: MachineModel | None = None,
    workload=None,
    prior: Mapping[str, float] | None = None,
) -> Cost:
    """The validated path: features of ``obj`` on ``target`` (or ``obj`` itself when it is
    :class:`CandidateFeatures` already derived for ``target``), priced by ``policy``."""
    target = as_target(target)
    if machine is None and target.kind.name == "llvm":
        machine = host_machine(host_target(num_cores=int(target.attrs["num-cores"])))
    stores = bool(getattr(policy, "needs_store_features", False))
    if isinstance(obj, CandidateFeatures):
        if stores and obj.store_features is None:
            raise PolicyError(
                f"{_label(policy)} needs store features: derive them with "
                "features(..., stores=True)",
                policy=_label(policy),
            )
        candidate = obj
    else:
        candidate = features(obj, target, workload, stores=stores)
    coeffs = validated_coefficients(policy, machine, prior)
    return validated_cost(policy, candidate, coeffs, hard_constraints(candidate, target))
