"""Property tests: bad input anywhere gives one of the package's clear errors, never a crash
from deep inside (KeyError, IndexError, AttributeError, a TVM internal error).

Derandomized so CI explores the same examples every run; widen the search locally with
``pytest tests/test_bad_input.py --hypothesis-seed=<n>`` after removing ``derandomize``."""

import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvm_ext import kernels as K
from tvm_ext import schedules as S
from tvm_ext.base.errors import LogError, ScheduleNotApplicable, TvmExtError

ANY = st.one_of(
    st.integers(-5, 70), st.floats(allow_nan=True), st.text(max_size=4), st.none(), st.booleans()
)
DIM = st.one_of(st.integers(-3, 40), ANY)
DTYPE = st.sampled_from(["float32", "float16", "bfloat16", "int8", "uint8", "float64", "", "f32"])


@settings(max_examples=120, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(K.SUITE)), st.lists(DIM, min_size=0, max_size=6), DTYPE)
def test_kernel_constructors_accept_or_refuse_clearly(kernel, dims, dtype):
    try:
        w = K.SUITE[kernel](*dims, dtype=dtype)
    except (ValueError, TypeError) as err:
        assert str(err)  # a message, naming the value
    else:
        assert w.flops >= 0 and w.min_bytes > 0


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.dictionaries(
        st.sampled_from(["mr", "nr", "lanes", "pack", "parallel", "unroll_k", "fb", "xt", "bogus"]),
        ANY,
        max_size=3,
    )
)
def test_schedule_configs_accept_or_refuse_clearly(host, config):
    w = K.matmul(24, 40, 16)
    try:
        S.schedule(w, host, **config)
    except (ValueError, TypeError, ScheduleNotApplicable) as err:
        assert str(err)


@pytest.fixture(scope="module")
def a_log(tmp_path_factory, host):
    from tvm_ext.search.tuner import tune

    root = tmp_path_factory.mktemp("fuzzlogs")
    tune(K.matmul(16, 16, 16).func, host, trials=8, batch=8, seed=0, log_dir=root, progress=False)
    return root


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
        st.sampled_from(
            [
                ("json", 1),
                ("json", "x"),
                ("json", []),
                ("json", None),
                ("json", {"schema": 1}),
                ("json", [[0, "no"]]),
            ]
        ),
    ),
)
def test_damaged_logs_give_log_errors(a_log, host, tmp_path_factory, name, damage):
    from tvm_ext.records.logs import find_logs
    from tvm_ext.search.replayer import replay

    (folder,) = find_logs(a_log)
    copy = tmp_path_factory.mktemp("damaged") / "logs"
    shutil.copytree(a_log, copy)
    (target,) = find_logs(copy)
    path = target / name
    kind, value = damage
    if kind == "truncate":
        path.write_text(path.read_text()[:value])
    else:
        path.write_text(json.dumps(value) + "\n")
    try:
        replay(target, allow_other_target=True, repeat=1)
    except (LogError, TvmExtError) as err:
        assert str(err)
