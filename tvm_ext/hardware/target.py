"""Targets done right: the host CPU with its real ISA, and CUDA by architecture.

TVM 0.27's wheel defaults to the triple ``x86_64-conda-linux-gnu``, with which LLVM rejects
``mcpu=native`` and silently emits SSE2 code (a 7x slowdown measured on a 512^3 matmul). We
name the CPU and a canonical triple explicitly and never fall back to generic code silently.
"""

from __future__ import annotations

import functools
import logging
import platform
import re
import warnings

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import checked_int
from tvm_ext.hardware.isa import table_cpu

log = logging.getLogger(__name__)

# The CUDA architectures TVM 0.27's codegen and nvcc accept, oldest to newest.
CUDA_ARCHS = (
    "sm_70",
    "sm_72",
    "sm_75",
    "sm_80",
    "sm_86",
    "sm_87",
    "sm_89",
    "sm_90",
    "sm_90a",
    "sm_100",
    "sm_100a",
    "sm_120",
)


# Features that change the code LLVM emits for kernels (vector ISA, FMA, bit manipulation).
# System features (pku, mwaitx, wbnoinvd, ...) are often hidden by hypervisors and say
# nothing about kernels, so they do not decide the closest CPU.
_CODEGEN_FEATURE = re.compile(
    r"^(sse|ssse|avx|fma|f16c|bmi|amx|popcnt|lzcnt|gfni|vaes|vpclmulqdq|aes|sha|neon|sve|"
    r"fp-armv8|dotprod|i8mm|bf16|fullfp16)"
)


class HostCPUWarning(UserWarning):
    """LLVM does not know this CPU by name; the closest known CPU is used instead."""


def host_triple() -> str:
    """A target triple LLVM accepts together with a real ``-mcpu`` on this host."""
    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    system = platform.system()
    if system == "Darwin":
        return f"{arch}-apple-darwin"
    if system == "Windows":
        return f"{arch}-pc-windows-msvc"
    return f"{arch}-unknown-linux-gnu"


def _true_features(feature_map) -> frozenset[str]:
    # The host map lists every feature LLVM knows, each True or False.
    return frozenset(str(k) for k, v in feature_map.items() if bool(v))


def _cpu_features(cpu: str, triple: str) -> frozenset[str]:
    target = tvm_api.Target({"kind": "llvm", "mtriple": triple, "mcpu": cpu})
    # This map lists only the features the CPU has (values are empty strings).
    return frozenset(str(k) for k in tvm_api.global_func("target.llvm_get_cpu_features")(target))


def closest_cpu(host_features: frozenset[str], isa_features: frozenset[str], triple: str) -> str:
    """The LLVM CPU whose ISA features are a subset of ``host_features``, with the most.

    ``isa_features`` is every feature the host probe reports on (true or false). Only
    features that change kernel code count; CPU feature sets also hold tuning flags
    (``fast-*``) and system features that hypervisors hide.
    """
    isa_features = frozenset(f for f in isa_features if _CODEGEN_FEATURE.match(f))
    archlist = tvm_api.global_func("target.llvm_get_cpu_archlist")
    names = [str(n) for n in archlist(tvm_api.Target({"kind": "llvm", "mtriple": triple}))]
    best, best_count = "generic", -1
    for name in sorted(names):
        feats = _cpu_features(name, triple) & isa_features
        if feats <= host_features and len(feats) > best_count:
            best, best_count = name, len(feats)
    return best


def _system_cpu() -> str:
    """LLVM's name for this host's CPU (``"generic"`` or a name it cannot target when it does
    not know the CPU)."""
    return str(tvm_api.global_func("target.llvm_get_system_cpu")())


def host_table_cpu(triple: str | None = None) -> str:
    """The name the hardware tables (:mod:`tvm_ext.hardware.isa`) know this host by: LLVM's
    name for its CPU (``"<name>+<die>"`` for a server die the tables list by its CPUID,
    :func:`~tvm_ext.hardware.isa.table_cpu`), or ``"unknown:<name>"`` when LLVM does not
    know it. A target built for
    the closest CPU LLVM knows says nothing about the host's pipes and clock (a Zen 5 under an
    LLVM without ``znver5`` would be priced as a Zen 4, whose FMA datapath is half as wide), so
    a bound on code that runs here must take the tables' branch for CPUs they do not name."""
    triple = triple or host_triple()
    cpu = _system_cpu()
    if cpu and cpu != "generic" and tvm_api.global_func("target.llvm_is_valid_cpu")(cpu, triple):
        if not _features_beyond(cpu, triple):
            return table_cpu(cpu, *cpuid())
    return f"unknown:{cpu or 'unnamed'}"


def cpuid(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, int, int]:
    """This host's CPUID vendor, family and model, as Linux reports them (``("", 0, 0)``
    where it cannot be read)."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
        return fields.get("vendor_id", ""), int(fields["cpu family"]), int(fields["model"])
    except (OSError, KeyError, ValueError):
        return "", 0, 0


def _features_beyond(cpu: str, triple: str) -> frozenset[str]:
    """Code-generation features this host has and LLVM's ``cpu`` never had. A hypervisor may
    report another CPU's family and model (a 2-core Xeon VM with AMX, AVX-512 BF16/FP16 and
    AVX10.1 reads as ``rocketlake``, which has none of them): a CPU with a feature its name
    lacks is not that CPU, and its tables (clock, reorder window) are not this host's."""
    host = _true_features(tvm_api.global_func("tvm.codegen.llvm.GetHostCPUFeatures")())
    extra = host - _cpu_features(cpu, triple)
    return frozenset(f for f in extra if _CODEGEN_FEATURE.match(f))


@functools.lru_cache(maxsize=None)
def _resolve_host_cpu(triple: str) -> tuple[str, str | None]:
    """(cpu name, warning or None) for this host under ``triple``."""
    cpu = _system_cpu()
    if cpu and cpu != "generic" and tvm_api.global_func("target.llvm_is_valid_cpu")(cpu, triple):
        return cpu, None
    probe = tvm_api.global_func("tvm.codegen.llvm.GetHostCPUFeatures")()
    closest = closest_cpu(_true_features(probe), frozenset(str(k) for k in probe), triple)
    return closest, (
        f"LLVM does not know this CPU ({cpu!r}) under {triple}; using the closest known CPU "
        f"{closest!r} (its features are a subset of the host's). Pass mcpu= to choose another."
    )


def host_target(mcpu: str | None = None, num_cores: int | None = None) -> "tvm_api.Target":
    """An llvm target for this machine's CPU.

    Parameters
    ----------
    mcpu
        LLVM CPU name; default the host CPU (or the closest CPU LLVM knows, with a warning).
    num_cores
        Threads to run with; default the physical core count.
    """
    triple = host_triple()
    if mcpu is None:
        mcpu, message = _resolve_host_cpu(triple)
        if message:
            warnings.warn(message, HostCPUWarning, stacklevel=2)
    elif not tvm_api.global_func("target.llvm_is_valid_cpu")(mcpu, triple):
        raise ValueError(f"mcpu={mcpu!r} is not a CPU LLVM knows under {triple}")
    cores = tvm_api.physical_cores() if num_cores is None else num_cores
    if not isinstance(cores, int) or cores < 1:
        raise ValueError(f"num_cores={num_cores!r} must be a positive int")
    return tvm_api.Target({"kind": "llvm", "mcpu": mcpu, "mtriple": triple, "num-cores": cores})


def generic_target(num_cores: int | None = None) -> "tvm_api.Target":
    """The llvm target TVM gives without a CPU name (SSE2 on x86): the baseline to beat."""
    cores = tvm_api.physical_cores() if num_cores is None else num_cores
    return tvm_api.Target({"kind": "llvm", "mtriple": host_triple(), "num-cores": cores})


def cuda_target(arch: str = "sm_90") -> "tvm_api.Target":
    """A CUDA target for compute capability ``arch`` (e.g. ``"sm_90"`` for H100/H200)."""
    if not isinstance(arch, str) or not re.fullmatch(r"sm_\d+a?", arch) or arch not in CUDA_ARCHS:
        raise ValueError(f"arch={arch!r} is not a CUDA architecture; choose one of {CUDA_ARCHS}")
    return tvm_api.Target({"kind": "cuda", "arch": arch})


def as_target(target) -> "tvm_api.Target":
    """Normalize ``target`` to a Target: None (the host), a Target, a JSON-style dict, or a
    TVM target string (``"llvm"``, ``"llvm -mcpu=znver3 -num-cores=4"``, ``"cuda"``,
    ``"cuda -arch=sm_90"``; see :func:`parse_target_string`)."""
    if target is None:
        return host_target()
    if isinstance(target, tvm_api.Target):
        return target
    text = target if isinstance(target, str) else None
    if text is not None:
        target = parse_target_string(text)
    if isinstance(target, dict):
        kind = target.get("kind")
        if kind not in ("llvm", "cuda"):
            raise ValueError(f"target kind {kind!r} is not supported; choose 'llvm' or 'cuda'")
        try:
            return tvm_api.Target(target)
        except ValueError as err:  # TVM names the bad option; say which string held it
            if text is None:
                raise
            raise ValueError(f"target {text!r}: {err}") from err
    raise TypeError(
        "target must be None, a tvm.target.Target, a dict or a target string such as 'llvm', "
        f"got {type(target).__name__}"
    )


# Options whose value is a list in TVM 0.27's target JSON (comma-separated in a string).
_LIST_OPTIONS = frozenset({"mattr", "keys", "libs", "cl-opt"})


def _option_value(name: str, text: str):
    if name in _LIST_OPTIONS:
        return [part for part in text.split(",") if part]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return {"true": True, "false": False}.get(text.lower(), text)


def parse_target_string(text: str) -> dict:
    """A TVM target string as the JSON dict TVM 0.27 takes (it parses no options itself).

    ``"llvm"`` is this host's CPU, as :func:`host_target` names it: the real ``mcpu`` (also
    for ``-mcpu=native``), a triple LLVM accepts with it and the physical cores, each unless
    the string gives its own. ``"cuda"`` without ``-arch`` takes the architecture of this
    machine's GPU, else ``sm_90`` with a warning.
    """
    words = text.split()
    if not words:
        raise ValueError("target string '' names no target kind; write e.g. 'llvm' or 'cuda'")
    config: dict = {"kind": words[0]}
    for word in words[1:]:
        name, sep, value = word.lstrip("-").partition("=")
        if not word.startswith("-") or not name or not sep:
            raise ValueError(f"target {text!r}: {word!r} is not an option of the form -name=value")
        config[name] = _option_value(name, value)
    if config["kind"] == "llvm":
        return _host_llvm_config(config)
    if config["kind"] == "cuda" and "arch" not in config:
        config["arch"] = _local_cuda_arch()
    return config


def _host_llvm_config(config: dict) -> dict:
    triple = str(config.setdefault("mtriple", host_triple()))
    if config.get("mcpu") in (None, "native"):
        cpu, message = _resolve_host_cpu(triple)
        if message:
            warnings.warn(message, HostCPUWarning, stacklevel=4)
        config["mcpu"] = cpu
    elif not tvm_api.global_func("target.llvm_is_valid_cpu")(str(config["mcpu"]), triple):
        raise ValueError(f"mcpu={config['mcpu']!r} is not a CPU LLVM knows under {triple}")
    cores = config.setdefault("num-cores", tvm_api.physical_cores())
    checked_int("num-cores", cores)
    return config


def _local_cuda_arch() -> str:
    dev = tvm_api.cuda(0)
    if dev.exist:
        return "sm_" + str(dev.compute_version).replace(".", "")
    warnings.warn(
        "target 'cuda' names no architecture and this machine has no GPU to read it from: "
        "assuming sm_90 (write 'cuda -arch=sm_80', say, for another GPU)",
        UserWarning,
        stacklevel=4,
    )
    return "sm_90"


def target_cores(target: "tvm_api.Target") -> int:
    """``num-cores`` of an llvm target (the threads to run with)."""
    attrs = target.attrs
    if "num-cores" not in attrs:
        raise ValueError(f"target {target} names no num-cores; use tvm_ext.host_target()")
    return int(attrs["num-cores"])


def target_cpu(target: "tvm_api.Target") -> str:
    """The ``mcpu`` of an llvm target, or ``"generic"``."""
    return str(target.attrs["mcpu"]) if "mcpu" in target.attrs else "generic"


def has_feature(target, feature: str) -> bool:
    """Whether an LLVM CPU target has an ISA feature (e.g. ``"avx512bf16"``), per LLVM's tables."""
    return bool(tvm_api.global_func("target.llvm_cpu_has_feature")(feature, target))


@functools.lru_cache(maxsize=None)
def _host_isa() -> frozenset[str]:
    probe = tvm_api.global_func("tvm.codegen.llvm.GetHostCPUFeatures")()
    return frozenset(f for f in _true_features(probe) if _CODEGEN_FEATURE.match(f))


def cpu_features(target) -> frozenset[str]:
    """ISA features of an llvm target's CPU that change kernel code (LLVM's tables for its
    ``mcpu``, plus any ``+feature`` of its ``mattr``, less any ``-feature``)."""
    triple = str(target.attrs.get("mtriple", "")) or host_triple()
    features = {f for f in _cpu_features(target_cpu(target), triple) if _CODEGEN_FEATURE.match(f)}
    for attr in target.attrs.get("mattr", ()):
        name = str(attr)
        (features.add if name.startswith("+") else features.discard)(name[1:])
    return frozenset(features)


def missing_features(target) -> list[str]:
    """ISA features code built for llvm ``target`` may use that this host's CPU lacks (sorted;
    empty when the host can run it). Only features that change kernel code count."""
    return sorted(cpu_features(target) - _host_isa())


def vector_bits(target) -> int:
    """Widest vector register of an llvm target, in bits (512 with AVX-512, 256 with AVX2).

    On x86 this reads the target's own features: TVM 0.27's ``target.llvm_get_vector_width``
    answered 512 for a haswell (AVX2) target on an AVX-512 host.
    """
    triple = str(target.attrs.get("mtriple", "")) or host_triple()
    if triple.startswith(("x86_64", "i386", "i686")):
        if has_feature(target, "avx512f"):
            return 512
        return 256 if has_feature(target, "avx") else 128
    return int(tvm_api.global_func("target.llvm_get_vector_width")(target))


def lanes_for(target, dtype_bits: int = 32) -> int:
    """Vector lanes of ``dtype_bits``-wide elements on ``target``."""
    return max(vector_bits(target) // dtype_bits, 1)
