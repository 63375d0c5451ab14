"""Whether a frozen log's schedule can run on another CPU: by what its code needs, not by the
CPU's name.

A schedule needs an ISA feature when it asks for it explicitly: its vectorized loops span
registers only that feature has (a 16-lane float32 loop tuned where 512-bit registers exist
is AVX-512 code; LLVM would split it on an AVX2 CPU, which is no longer the schedule that was
tuned), or it calls an instruction of that feature (``llvm.x86.avx512bf16.dpbf16ps.512`` is
AVX512-BF16, ``llvm.x86.tdpbf16ps`` AMX-BF16). Everything else the log's CPU had (its
``mcpu``) LLVM chooses again when the schedule is built for the CPU it runs on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import cpu_features, missing_features, target_cpu, vector_bits
from tvm_ext.records.logs import cpu_model, target_key

tirx, s_tir = tvm_api.tirx, tvm_api.s_tir

# (prefix of an LLVM x86 intrinsic the TIR calls, the features it needs), first match wins.
INTRINSIC_FEATURES = (
    ("llvm.x86.avx512bf16.", ("avx512f", "avx512bf16")),
    ("llvm.x86.avx512.vpdpbusd", ("avx512f", "avx512vnni")),
    ("llvm.x86.avx512.vpdpwssd", ("avx512f", "avx512vnni")),
    ("llvm.x86.avx512.", ("avx512f",)),
    ("llvm.x86.tdpbf16ps", ("amx-tile", "amx-bf16")),
    ("llvm.x86.tdpb", ("amx-tile", "amx-int8")),  # tdpbssd, tdpbsud, tdpbusd, tdpbuud
    ("llvm.x86.tile", ("amx-tile",)),  # tileloadd64, tilestored64, tilezero, tilerelease
    ("llvm.x86.ldtilecfg", ("amx-tile",)),
    ("llvm.x86.avx2.", ("avx2",)),
)
# Vector registers wider than this many bits need the feature (x86).
WIDTH_FEATURES = ((256, "avx512f"), (128, "avx"))


def _bits(dtype: str) -> int:
    match = re.search(r"(\d+)$", str(dtype))
    return int(match[1]) if match else 32


def vectorized_stores(stmt, lanes: int = 1, found=None) -> list[tuple[int, str]]:
    """(lanes, dtype) of every buffer store inside a vectorized loop of ``stmt``."""
    found = [] if found is None else found
    if isinstance(stmt, tirx.For):
        vector = stmt.kind == tirx.ForKind.VECTORIZED and isinstance(stmt.extent, tirx.IntImm)
        vectorized_stores(stmt.body, lanes * (int(stmt.extent.value) if vector else 1), found)
    elif isinstance(stmt, tirx.SeqStmt):
        for inner in stmt.seq:
            vectorized_stores(inner, lanes, found)
    elif isinstance(stmt, s_tir.SBlockRealize):
        vectorized_stores(stmt.block, lanes, found)
    elif isinstance(stmt, tirx.BufferStore):
        if lanes > 1:
            found.append((lanes, str(stmt.buffer.dtype)))
    else:  # blocks (body, init), conditionals, attributes, allocations, lets
        for name in ("init", "body", "then_case", "else_case"):
            inner = getattr(stmt, name, None)
            if inner is not None:
                vectorized_stores(inner, lanes, found)
    return found


def imported_llvm(stmt, found=None) -> list[str]:
    """The LLVM IR a schedule links in (``pragma_import_llvm`` attributes: the shim of a
    tensorize intrinsic TVM cannot type, such as ``vdpbf16ps``'s)."""
    found = [] if found is None else found
    if isinstance(stmt, tirx.AttrStmt) and str(stmt.attr_key) == "pragma_import_llvm":
        found.append(str(getattr(stmt.value, "value", stmt.value)))
    if isinstance(stmt, tirx.SeqStmt):
        for inner in stmt.seq:
            imported_llvm(inner, found)
    elif isinstance(stmt, s_tir.SBlockRealize):
        imported_llvm(stmt.block, found)
    else:
        for name in ("init", "body", "then_case", "else_case"):
            inner = getattr(stmt, name, None)
            if inner is not None:
                imported_llvm(inner, found)
    return found


def schedule_features(sch, log_target) -> dict[str, str]:
    """ISA features the schedule's code needs, each with what needs it (see the module
    docstring): vector width (capped at the widest register of ``log_target``, the CPU it
    was tuned for) and the x86 intrinsics it calls."""
    needs: dict[str, str] = {}
    triple = str(log_target.attrs.get("mtriple", ""))
    if log_target.kind.name != "llvm" or not triple.startswith(("x86_64", "i386", "i686")):
        return needs
    stores, texts = [], [sch.mod.script()]
    for func in sch.mod.functions.values():
        if isinstance(func, tvm_api.PrimFunc):
            stores += vectorized_stores(func.body)
            texts += imported_llvm(func.body)
    if stores:
        lanes, dtype = max(stores, key=lambda s: s[0] * _bits(s[1]))
        width = min(lanes * _bits(dtype), vector_bits(log_target))
        for above, feature in WIDTH_FEATURES:
            if width > above:
                needs[feature] = f"{width}-bit vectors ({lanes} x {dtype} vectorized loops)"
                break
    for name in sorted(set(re.findall(r"llvm\.x86\.[\w.]+", "\n".join(texts)))):
        for prefix, features in INTRINSIC_FEATURES:
            if name.startswith(prefix):
                for feature in features:
                    needs.setdefault(feature, name)
                break
    return needs


@dataclass(frozen=True)
class Portability:
    """Whether a log's schedule replays on a target, and what decides it."""

    replays: bool
    same_machine: bool  # tuned for this target and CPU model: its recorded times apply
    needs: dict  # ISA feature -> what in the schedule needs it
    missing: tuple[str, ...]  # features it needs that the target's CPU lacks
    reason: str  # one line: why it does not replay, or where its times come from

    @property
    def summary(self) -> str:
        """A few words for reports: ``yes``, ``yes (times from <target>)``, ``no: needs
        <features>`` or ``no: <reason>``."""
        if not self.replays:
            return f"no: needs {', '.join(self.missing)}" if self.missing else f"no: {self.reason}"
        return "yes" if self.same_machine else f"yes ({self.reason})"


def portability(manifest: dict, sch, target) -> Portability:
    """Whether the schedule of a log (its ``manifest``) replays for ``target`` on this host."""
    log_target = tvm_api.Target(manifest["target"])
    log_key, here_key = manifest.get("target_key"), target_key(target)
    kind, here_kind = log_target.kind.name, target.kind.name
    if kind != here_kind:
        reason = f"tuned for {log_key} ({kind}), this target is {here_key} ({here_kind})"
        return Portability(False, False, {}, (), reason)
    log_cpu = manifest.get("cpu_model")
    same = log_key == here_key and (kind != "llvm" or not log_cpu or log_cpu == cpu_model())
    needs = schedule_features(sch, log_target) if kind == "llvm" else {}
    have = cpu_features(target) if kind == "llvm" else frozenset()
    missing = tuple(sorted(f for f in needs if f not in have))
    if missing:
        uses = "; ".join(f"{f} for {why}" for f, why in sorted(needs.items()) if f in missing)
        reason = (
            f"its schedule uses {uses}, which {target_cpu(target)} lacks "
            f"(missing: {', '.join(missing)})"
        )
        return Portability(False, same, needs, missing, reason)
    where = f"{log_key}" + (f", {log_cpu!r}" if log_cpu else "")
    reason = "tuned here" if same else f"times from {where}"
    return Portability(True, same, needs, (), reason)


def runnable_here(target) -> list[str]:
    """ISA features code built for ``target`` may use that this host lacks (none for CUDA)."""
    return missing_features(target) if target.kind.name == "llvm" else []
