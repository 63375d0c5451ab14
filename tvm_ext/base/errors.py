"""The package's error family.

Input validation at the public boundary raises the standard ``ValueError``/``TypeError``
(a compiled model's inputs: :class:`InputError`, which is both a ``ValueError`` and one of
ours); failures of the package's own work raise a subclass of :class:`TvmExtError`, so callers
can catch them by type.
"""

from __future__ import annotations


class TvmExtError(Exception):
    """Base class of every error raised by tvm-ext's own work."""


class ParityError(TvmExtError):
    """A built module's output does not match its reference within the dtype's tolerance."""

    def __init__(self, message: str, *, max_abs_error: float, max_rel_error: float):
        super().__init__(message)
        self.max_abs_error = max_abs_error
        self.max_rel_error = max_rel_error


class InputError(TvmExtError, ValueError):
    """A compiled model was called with inputs it cannot take: the wrong number, kind, rank,
    shape or dtype, or an index outside the table it indexes (where torch raises
    ``IndexError``). The message names the input; for an index, also the position, the value
    and the valid range, kept as attributes."""

    def __init__(self, message: str, *, input: str | None = None, position=None, value=None,
                 valid: tuple[int, int] | None = None):  # fmt: skip
        super().__init__(message)
        self.input, self.position, self.value, self.valid = input, position, value, valid


class UnsupportedModel(TvmExtError, ValueError):
    """A torch module TVM's importer cannot take: the message names the operator(s) and the
    graph node(s) that use them (``operators``: operator -> node names)."""

    def __init__(self, message: str, *, operators: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.operators = operators or {}


class ThreadConfigError(TvmExtError):
    """TVM's runtime thread pool cannot run with the number of threads a target asks for."""


class ProbeError(TvmExtError):
    """A machine-model probe failed or produced an implausible figure."""


class ScheduleNotApplicable(TvmExtError):
    """A hand schedule does not apply to this workload on this target; the message says why."""


class PolicyError(TvmExtError):
    """A cost policy returned an invalid number (NaN, infinite, negative) or failed; the
    message names the policy."""

    def __init__(self, message: str, *, policy: str):
        super().__init__(message)
        self.policy = policy


class ModelFileError(TvmExtError):
    """A saved service profile or learned model cannot be loaded (unreadable, wrong schema or
    kind, missing fields); the message names the file."""


class DatasetError(TvmExtError):
    """A dataset cannot train or calibrate a policy (too few rows or workloads, missing
    columns); the message says what is missing."""


class TuneError(TvmExtError):
    """A tune could not measure anything: its device is unreachable, or every candidate failed
    (the message says how many, and the first failure). What was recorded stays in the log."""

    def __init__(self, message: str, *, failed: int = 0, first_failure: str | None = None):
        super().__init__(message)
        self.failed = failed
        self.first_failure = first_failure


class DeviceError(TvmExtError):
    """A remote device cannot be reached through its RPC tracker (the tracker does not answer,
    or no server is registered under the key); the message says what to start."""


class LogError(TvmExtError):
    """A frozen tuning log cannot be used; the message says why and what to do."""


class NoLogFound(LogError):
    """No log exists for this workload and target."""


class WorkloadMismatch(LogError):
    """The log was tuned for a different workload (the message shows what differs)."""


class TargetMismatch(LogError):
    """The log was tuned for another kind of target, or its schedule uses ISA features this
    CPU lacks (the message names them; pass allow_other_target=True to use it anyway)."""


class CorruptLog(LogError):
    """A log file cannot be read; the message names the file and line."""


class OtherCPUWarning(UserWarning):
    """A log tuned on another CPU replays here (this CPU has every ISA feature its schedule
    uses), but its recorded times belong to that CPU; the message shows both."""


class LogVersionWarning(UserWarning):
    """The log was written by another TVM version; replay still re-checks parity."""
