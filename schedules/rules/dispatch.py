"""Schedule every PrimFunc of a module with the first IR rule that takes it.

A rule reads the IR, dlight-style: ``rule.schedule_func(func, target)`` returns a Schedule, or
None for "not mine". The table :func:`apply` returns says, per function, which rule took it,
its FLOPs and its share of the module's FLOPs (weighted by how often the module calls it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from types import ModuleType

from tvm_ext.schedules.common import assumed_bounds
from tvm_ext.schedules.rules import (
    contraction,
    dot,
    fallback,
    gpu,
    injective,
    rows,
    staged,
    suite,
    unit_reductions,
    window,
)

from tvm_ext.base import op_count, tvm_api
from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.hardware.target import as_target

log = logging.getLogger(__name__)

# The first rule that returns a schedule takes the function; the fallback takes anything.
CPU_RULES: tuple[ModuleType, ...] = (
    suite,
    rows,
    window,
    dot,
    contraction,
    staged,
    injective,
    fallback,
)
# GPU targets: the suite's CUDA hand schedules, then TVM's dlight GPU rules (their fallback
# binds anything to blocks and threads).
GPU_RULES = (suite, *gpu.DLIGHT_RULES)


def rules_for(target) -> tuple:
    """The rule list for ``target``'s kind (CPU or GPU); ScheduleNotApplicable otherwise."""
    kind = as_target(target).kind.name
    if kind == "llvm":
        return CPU_RULES
    if kind in gpu.GPU_KINDS:
        return GPU_RULES
    raise ScheduleNotApplicable(f"no IR rules for {kind} targets (llvm and GPU kinds have them)")


@dataclass(frozen=True)
class Scheduled:
    """One function of a module: the rule that took it and its weight in the module."""

    name: str
    rule: str
    flops: int  # per call (op_count.algorithm_flops of the unscheduled function)
    calls: int  # call sites in the module's Relax functions (1 for a lone PrimFunc)
    share: float  # of the module's FLOPs, calls counted


@dataclass(frozen=True)
class Applied:
    """A module with every PrimFunc scheduled, and the table of who took what."""

    mod: "tvm_api.IRModule"
    functions: tuple[Scheduled, ...]

    def table(self):
        """The functions as a pandas DataFrame, largest share first."""
        import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

        rows = [vars(s) for s in sorted(self.functions, key=lambda s: -s.share)]
        return pd.DataFrame(rows, columns=["name", "rule", "flops", "calls", "share"])

    def share_by_rule(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for s in self.functions:
            out[s.rule] = out.get(s.rule, 0.0) + s.share
        return out


def schedule_func(func, target, rules=None) -> tuple["tvm_api.Schedule", str]:
    """(schedule, rule name) of one PrimFunc: the first rule that takes it (``rules`` default
    :func:`rules_for` the target)."""
    target = as_target(target)
    rules = rules_for(target) if rules is None else rules
    attrs = func.attrs or {}
    highs, lows = (
        {str(k): int(v) for k, v in (attrs.get(f"tir_var_{side}_bound") or {}).items()}
        for side in ("upper", "lower")
    )
    with assumed_bounds(highs, lows):
        return _first_taker(unit_reductions.folded(func), target, rules)


def _first_taker(func, target, rules):
    for rule in rules:
        try:
            sch = rule.schedule_func(func, target)
        except (tvm_api.ScheduleError, tvm_api.InternalError) as err:
            # The pattern matched but a primitive refused (or failed one of TVM's internal
            # checks on IR the rule did not foresee): the next rule takes the function.
            log.warning("rule %s gave up on %s: %s", rule.NAME, _name(func), _first_line(err))
            continue
        if sch is not None:
            return sch, rule.NAME
    raise ScheduleNotApplicable(f"no rule took {_name(func)}")


def _name(func) -> str:
    return str(func.attrs.get("global_symbol", "the function")) if func.attrs else "the function"


def _first_line(err) -> str:
    lines = [line for line in str(err).splitlines() if "Error" in line or "error" in line]
    return (lines or str(err).splitlines() or [""])[0][:200]


def apply(mod, target=None, rules=None) -> Applied:
    """Schedule every PrimFunc of ``mod`` (an IRModule: a Relax model after legalization, or
    a module of PrimFuncs) for ``target`` (default the host; a CPU or a GPU, whose rules
    :func:`rules_for` gives); other functions are kept."""
    target = as_target(target)
    calls = call_counts(mod)
    funcs = {gv: f for gv, f in mod.functions.items() if isinstance(f, tvm_api.PrimFunc)}
    flops = {gv.name_hint: op_count.algorithm_flops(f) or 0 for gv, f in funcs.items()}
    total = sum(flops[n] * calls.get(n, 1) for n in flops) or 1
    out, report = mod, []
    for gv, func in funcs.items():
        sch, rule = schedule_func(func.with_attr("global_symbol", gv.name_hint), target, rules)
        out = _replace(out, gv, sch.mod["main"].with_attr("global_symbol", gv.name_hint))
        n = calls.get(gv.name_hint, 1)
        report.append(Scheduled(gv.name_hint, rule, flops[gv.name_hint], n,
                                flops[gv.name_hint] * n / total))  # fmt: skip
    return Applied(out, tuple(report))


def _replace(mod, gv, func):
    new = tvm_api.IRModule(dict(mod.functions.items()), attrs=mod.attrs)
    new[gv] = func
    return new


def call_counts(mod) -> dict[str, int]:
    """How many ``call_tir`` sites of each PrimFunc the module's Relax functions hold."""
    counts: dict[str, int] = {}
    for func in mod.functions.values():
        if isinstance(func, tvm_api.PrimFunc):
            continue
        for name in tvm_api.called_prim_funcs(func):
            counts[name] = counts.get(name, 0) + 1
    return counts
