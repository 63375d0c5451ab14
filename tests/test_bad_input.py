"""Property tests: bad input anywhere gives one of the package's clear errors, never a crash
from deep inside (KeyError, IndexError, AttributeError, a TVM internal error); good input is
accepted and does what it says.

A refusal counts only when the package itself raised it (its innermost traceback frame is in
the package: an error raised by TVM, the FFI or Python's argument binding is not one) and its
message names the value it refused. An acceptance counts only when the input was valid.

Derandomized so CI explores the same examples every run; widen the search locally with
``pytest tests/test_bad_input.py --hypothesis-seed=<n>`` after removing ``derandomize``."""

import inspect
import json
import math
import shutil

import numpy as np
import pytest
from conftest import raised_in_package
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tvm_ext import kernels as K
from tvm_ext import schedules as S
from tvm_ext.base.errors import LogError, ScheduleNotApplicable, TvmExtError
from tvm_ext.measurement.measure import verify

ANY = st.one_of(
    st.integers(-5, 70), st.floats(allow_nan=True), st.text(max_size=4), st.none(), st.booleans()
)
DIM = st.one_of(st.integers(-3, 40), ANY)
DTYPE = st.sampled_from(["float32", "float16", "bfloat16", "int8", "uint8", "float64", "", "f32"])
# Values each kind of parameter may take for the draw; keyword names come from the signature,
# so a refusal is never Python's own argument-count error.
BY_NAME = {"eps": st.one_of(st.floats(1e-9, 1.0), ANY), "alpha": st.one_of(st.floats(-4, 4), ANY),
           "exp": st.sampled_from(["libm", "fast", "", 3]),
           "transpose_b": st.one_of(st.booleans(), ANY)}  # fmt: skip


# Valid values are drawn about half of the time, so that accepted inputs are explored too.
SMALL = st.integers(1, 24)
GOOD = {"dtype": st.just("float32"), "eps": st.floats(1e-6, 1e-2), "alpha": st.floats(-2, 2),
        "exp": st.just("libm"), "transpose_b": st.booleans()}  # fmt: skip


def _positive_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1


def _refusal_names_a_value(err, kwargs) -> bool:
    """The message shows ``name=value`` for one of the arguments given."""
    text = str(err)
    return any(f"{name}={value!r}" in text for name, value in kwargs.items())


@settings(max_examples=120, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(K.SUITE)), st.data())
def test_kernel_constructors_accept_or_refuse_clearly(kernel, data):
    make = K.SUITE[kernel]
    kwargs = {}
    for name, p in inspect.signature(make).parameters.items():
        if p.default is not inspect.Parameter.empty and data.draw(st.booleans()):
            continue  # leave a default in place
        kind = DTYPE if name == "dtype" else BY_NAME.get(name, DIM)
        kwargs[name] = data.draw(st.one_of(GOOD.get(name, SMALL), kind), label=name)
    try:
        w = make(**kwargs)
    except (ValueError, TypeError, TvmExtError) as err:
        event("refused")
        assert raised_in_package(err), f"not refused by tvm-ext: {type(err).__name__}: {err}"
        assert _refusal_names_a_value(err, kwargs), f"{err!s} names none of {kwargs}"
        dims = {n: v for n, v in kwargs.items() if n not in BY_NAME and n != "dtype"}
        named = [n for n in dims if f"{n}=" in str(err)]
        # A dimension named in a refusal really is bad (never a valid one refused).
        assert all(not _positive_int(dims[n]) for n in named if " positive int" in str(err))
    else:
        # Accepted: every dimension is a positive int, and the workload is what was asked.
        event("accepted")
        for name, value in kwargs.items():
            if name not in BY_NAME and name != "dtype":
                assert _positive_int(value), f"{kernel} accepted {name}={value!r}"
                assert w.args[name] == value
        if "eps" in kwargs:
            eps = kwargs["eps"]
            assert isinstance(eps, float) and math.isfinite(eps) and eps > 0, eps
        assert w.dtype == kwargs.get("dtype", "float32")
        assert w.flops > 0 and w.min_bytes > 0
        assert len(w.func.params) == len(w.inputs(0))


CONFIG_KEYS = ["mr", "nr", "lanes", "pack", "parallel", "unroll_k", "fb", "xt", "bogus"]
CONFIG_GOOD = {"mr": st.integers(1, 8), "nr": st.sampled_from([8, 16, 32]),
               "lanes": st.sampled_from([4, 8]), "pack": st.sampled_from(["panel", "full", "none"]),
               "parallel": st.sampled_from(["panels", "tiles"]),
               "unroll_k": st.sampled_from([1, 2, 4, 16])}  # fmt: skip


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.sampled_from(CONFIG_KEYS), max_size=3, unique=True), st.data())
def test_schedule_configs_accept_or_refuse_clearly(host, keys, data):
    w = K.matmul(24, 40, 16)
    config = {k: data.draw(st.one_of(CONFIG_GOOD.get(k, ANY), ANY), label=k) for k in keys}
    try:
        sch = S.schedule(w, host, **config)
    except (ValueError, TypeError, ScheduleNotApplicable) as err:
        event("refused")
        assert raised_in_package(err), f"not refused by tvm-ext: {type(err).__name__}: {err}"
        # The message names the field it refused (or lists the valid ones).
        assert any(key in str(err) for key in config), f"{err!s} names none of {sorted(config)}"
    else:
        # Accepted: only real fields, and the schedule computes the matmul.
        event("accepted")
        assert set(config) <= {"mr", "nr", "lanes", "pack", "parallel", "unroll_k"}
        verify(sch, w, host)


@pytest.fixture(scope="module")
def a_log(tmp_path_factory, host):
    from tvm_ext.kernel_tuner.tuner import tune

    root = tmp_path_factory.mktemp("fuzzlogs")
    tune(K.matmul(16, 16, 16).func, host, trials=8, batch=8, seed=0, log_dir=root, progress=False)
    return root


WORKLOADS = "database_workload.json"
JSON_DAMAGE = [1, "x", [], None, {"schema": 1}, [[0, "no"]]]


def _same_content(text: str, original: str, name: str) -> bool:
    """Whether damaged ``text`` still holds exactly the original data (a truncation that cut
    only trailing whitespace), or, for the records, whole original lines (fewer records)."""
    if text.strip() == original.strip():
        return True
    if name == "database_tuning_record.json":
        kept = text.splitlines()
        return kept == original.splitlines()[: len(kept)] and text.endswith("\n")
    return False


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.sampled_from(["manifest.json", "database_tuning_record.json", "database_workload.json"]),
    st.one_of(
        st.integers(0, 4000).map(lambda n: ("truncate", n)),
        st.sampled_from([("json", v) for v in JSON_DAMAGE]),
    ),
)
def test_damaged_logs_give_log_errors(a_log, host, tmp_path_factory, name, damage):
    from tvm_ext.kernel_tuner.replayer import replay
    from tvm_ext.records.logs import find_logs

    (folder,) = find_logs(a_log)
    copy = tmp_path_factory.mktemp("damaged") / "logs"
    shutil.copytree(a_log, copy)
    (target,) = find_logs(copy)
    path = target / name
    original = path.read_text()
    kind, value = damage
    if kind == "truncate":
        path.write_text(original[:value])
    else:
        path.write_text(json.dumps(value) + "\n")
    try:
        result = replay(target, allow_other_target=True, repeat=1)
    except LogError as err:
        assert raised_in_package(err), f"{type(err).__name__}: {err}"
        assert name in str(err), f"{err!s} does not name {name}"  # says which file
    else:
        assert _same_content(path.read_text(), original, name), "a damaged log was replayed"
        assert result.measurement.max_rel_error < 1e-4


@pytest.mark.parametrize("value", [1, {"schema": 1}, ["1", "not base64"]], ids=repr)
def test_replay_parses_the_workload_file(a_log, tmp_path, value):
    from tvm_ext.kernel_tuner.replayer import replay
    from tvm_ext.records.logs import find_logs

    copy = tmp_path / "logs"
    shutil.copytree(a_log, copy)
    (folder,) = find_logs(copy)
    (folder / WORKLOADS).write_text(json.dumps(value) + "\n")
    with pytest.raises(LogError, match=WORKLOADS):
        replay(folder, allow_other_target=True, repeat=1)
