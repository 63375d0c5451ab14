"""Frozen logs: layout and manifest, replay without search, and every replay error."""

import json
import shutil
import subprocess
import sys

import pytest
import tvm_ffi

import tvm_ext
from tvm_ext import kernels as K
from tvm_ext.base import tvm_api
from tvm_ext.base.errors import (
    CorruptLog,
    LogVersionWarning,
    NoLogFound,
    OtherCPUWarning,
    TargetMismatch,
    WorkloadMismatch,
)
from tvm_ext.commands.report import report
from tvm_ext.kernel_tuner.portability import schedule_features
from tvm_ext.kernel_tuner.replayer import replay, replays_here
from tvm_ext.kernel_tuner.tuner import tune
from tvm_ext.records.logs import (
    FAILED_SECONDS,
    find_logs,
    log_folder,
    make_manifest,
    merge_into_log,
    read_manifest,
    target_key,
    uses_tensorize,
)

W = K.matmul(32, 32, 32)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, host):
    root = tmp_path_factory.mktemp("logs")
    result = tune(W.func, host, trials=8, batch=8, seed=3, log_dir=root, progress=False)
    return root, result


@pytest.fixture
def log_copy(tuned, tmp_path):
    root, _ = tuned
    dst = tmp_path / "logs"
    shutil.copytree(root, dst)
    (folder,) = find_logs(dst)
    return dst, folder


def test_layout_and_manifest(tuned, host):
    root, result = tuned
    folder = log_folder(root, host, W.func)
    assert str(folder) == result.log_folder
    assert folder.parent.name == f"llvm-{host.attrs['mcpu']}-{host.attrs['num-cores']}c"
    assert folder.name == W.key
    m = read_manifest(folder)
    for key in (
        "package_version",
        "tvm_version",
        "target",
        "cpu_model",
        "threads",
        "workload_key",
        "structural_hash",
        "policy",
        "trials",
        "best_seconds",
        "best_gflops",
        "parity",
        "date",
        "binding",
    ):
        assert m[key] is not None, key
    assert m["threads"] == int(host.attrs["num-cores"]) and m["parity"]["ok"] is True
    lines = (folder / "database_tuning_record.json").read_text().splitlines()
    assert m["records"] == len(lines) >= 1


def test_replay_matches_the_tune(tuned, host):
    root, result = tuned
    r = replay(W, host, root)
    assert r.measurement.max_rel_error < 1e-4
    assert tvm_ffi.structural_equal(r.mod, result.mod)
    # The replay reports what the tune measured for the module it returned (not a field
    # copied from itself), and its own fresh time of the same module beside it.
    assert r.recorded["best_seconds"] == pytest.approx(result.measurement.seconds)
    assert r.recorded["parity"]["max_rel_error"] == pytest.approx(result.measurement.max_rel_error)
    assert r.measurement.seconds > 0
    by_path = replay(str(r.folder))  # the folder alone names its workload
    assert tvm_ffi.structural_equal(by_path.mod, result.mod)


def test_second_tune_adds_records_without_losing_any(tuned, tmp_path, host):
    root, _ = tuned
    dst = tmp_path / "again"
    shutil.copytree(root, dst)
    (folder,) = find_logs(dst)
    before = (folder / "database_tuning_record.json").read_text().splitlines()
    # A recorded time nothing here achieves (a lucky run, another day, another host): the
    # second tune must neither cut with it nor carry it on as the log's figure.
    manifest = read_manifest(folder)
    manifest["best_seconds"] = 1e-9
    (folder / "manifest.json").write_text(json.dumps(manifest))
    again = tune(W.func, host, trials=8, batch=8, seed=4, log_dir=dst, progress=False)
    after = (folder / "database_tuning_record.json").read_text().splitlines()
    assert set(before) <= set(after) and len(after) > len(before)
    merged = read_manifest(folder)
    assert merged["tunes"] == 2
    # The cut is the log's record re-measured now: 32^3 in 100 ns would be 655 GFLOP/s.
    assert again.stats["initial_cut_s"] > 1e-7
    assert merged["best_seconds"] == pytest.approx(again.measurement.seconds)


def test_interrupted_tune_leaves_a_valid_log(tmp_path, host, monkeypatch):
    ms = tvm_api.meta_schedule()
    real = ms.tune.tune_tasks

    def interrupted(**kwargs):
        real(**{**kwargs, "max_trials_global": 8})
        raise KeyboardInterrupt

    monkeypatch.setattr(ms.tune, "tune_tasks", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tune(W.func, host, trials=64, batch=8, seed=5, log_dir=tmp_path, progress=False)
    (folder,) = find_logs(tmp_path)
    assert read_manifest(folder)["parity"]["ok"] is None  # not checked before the interrupt
    monkeypatch.setattr(ms.tune, "tune_tasks", real)
    assert replay(W, host, tmp_path).measurement.max_rel_error < 1e-4


def test_no_log(tmp_path, host):
    with pytest.raises(NoLogFound, match="no log for matmul_M32_N32_K32_float32"):
        replay(W, host, tmp_path)


def test_workload_changed_shows_the_difference(log_copy, host):
    root, folder = log_copy
    other = K.matmul(32, 32, 32, "float16")
    shutil.copytree(folder, folder.parent / other.key)
    with pytest.raises(WorkloadMismatch, match=r'(?s)different workload.*"dtype": "float16"'):
        replay(other, host, root)


def test_other_cpu_with_every_feature_replays_with_both_figures(log_copy, host):
    # Replay decides by what the schedule needs, not by the CPU's name: a log of another CPU
    # whose features this one has replays, with its recorded and replayed figures shown.
    root, folder = log_copy
    m = read_manifest(folder)
    if not str(m["target"].get("mtriple", "")).startswith("x86_64"):
        pytest.skip("an x86 test")
    m["cpu_model"] = "Some Other CPU"
    m["target"] = dict(m["target"], mcpu="haswell")  # crafted: tuned on an AVX2 CPU
    m["target_key"] = "llvm-haswell-2c"
    (folder / "manifest.json").write_text(json.dumps(m))
    with pytest.warns(OtherCPUWarning) as caught:
        r = replay(str(folder))
    assert r.measurement.max_rel_error < 1e-4 and r.same_machine is False
    text = str(caught[0].message)
    assert "timed on llvm-haswell-2c (Some Other CPU)" in text and "do not transfer" in text
    assert f"recorded {m['best_seconds'] * 1e3:.4g} ms" in text
    assert f"replayed here on {target_key(host)}" in text and "GFLOP/s" in text


def test_a_schedule_needing_a_missing_feature_is_refused_naming_it(log_copy, host):
    # x86-64 (SSE2) runs on every x86-64 host and has none of the vector ISAs the schedule
    # (tuned here, with the host's AVX2 or AVX-512 vectors) uses.
    root, folder = log_copy
    if tvm_api.Target(read_manifest(folder)["target"]).attrs.get("mtriple", "")[:6] != "x86_64":
        pytest.skip("an x86 test")
    sse2 = "llvm -mcpu=x86-64"
    with pytest.raises(TargetMismatch, match=r"uses avx\S* for \d+-bit vectors .*missing: avx"):
        replay(str(folder), sse2)
    with pytest.warns(UserWarning, match="replaying anyway"):
        assert replay(str(folder), sse2, allow_other_target=True).measurement.max_rel_error < 1e-4


def _frozen(root, w, sch, target):
    """A log of one record (``sch`` on ``target``) written as a tune writes it."""
    ms = tvm_api.meta_schedule()
    work = root / "work"
    work.mkdir(parents=True)
    database = ms.database.JSONDatabase(work_dir=str(work))
    mod = tvm_api.IRModule({"main": w.func.with_attr("global_symbol", "main")})
    record = ms.database.TuningRecord(
        sch.trace, database.commit_workload(mod), [1e-4], target,
        ms.arg_info.ArgInfo.from_prim_func(w.func),
    )  # fmt: skip
    database.commit_tuning_record(record)
    folder = log_folder(root, target, w.func)
    manifest = make_manifest(w.func, target, threads=2, policy="crafted", stats={},
                             seconds=1e-4, gflops=w.flops / 1e-4 / 1e9, max_rel_error=0.0,
                             workload=w)  # fmt: skip
    merge_into_log(folder, work, manifest)
    return folder


def test_a_vdpbf16ps_schedule_needs_avx512_bf16(tmp_path, host):
    from tvm_ext import schedules as S
    from tvm_ext.hardware.target import missing_features

    spr = tvm_api.Target({"kind": "llvm", "mcpu": "sapphirerapids", "num-cores": 2,
                          "mtriple": "x86_64-unknown-linux-gnu"})  # fmt: skip
    haswell = tvm_ext.host_target(mcpu="haswell") if host.attrs["mtriple"][:6] == "x86_64" else None
    if haswell is None or missing_features(haswell):
        pytest.skip("needs an x86 host that runs AVX2 code")
    w = K.matmul(64, 64, 64, "bfloat16")
    sch = S.schedule(w, spr)  # built for a CPU with AVX512-BF16: tensorized with vdpbf16ps
    assert schedule_features(sch, spr)["avx512bf16"] == "llvm.x86.avx512bf16.dpbf16ps.512"
    folder = _frozen(tmp_path, w, sch, spr)
    with pytest.raises(TargetMismatch, match=r"uses avx512bf16 for llvm.x86.avx512bf16.dpbf16ps"
                                             r".*missing: avx512bf16, avx512f"):  # fmt: skip
        replay(str(folder), haswell)
    assert replays_here(folder, haswell) == "no: needs avx512bf16, avx512f"


def test_other_target_kind_is_refused(log_copy, host):
    root, folder = log_copy
    m = read_manifest(folder)
    m["target"], m["target_key"] = {"kind": "cuda", "arch": "sm_90"}, "cuda-sm_90"
    (folder / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(TargetMismatch, match=r"tuned for cuda-sm_90 \(cuda\), this target is"):
        replay(str(folder))


def test_replaying_what_is_not_a_log_folder_says_so(tuned, tmp_path):
    root, _ = tuned
    with pytest.raises(NoLogFound, match="/nonexistent/folder: no such folder"):
        replay("/nonexistent/folder")
    with pytest.raises(NoLogFound, match=r"holds 1 logs, not one: pass one log folder, e\.g\."):
        replay(str(root))
    with pytest.raises(NoLogFound, match="is not a tuning log: it has no manifest.json"):
        replay(str(tmp_path))


def test_corrupt_records_name_file_and_line(log_copy, host):
    root, folder = log_copy
    path = folder / "database_tuning_record.json"
    lines = path.read_text().splitlines()
    lines.append(lines[0][: len(lines[0]) // 2])  # a torn last line
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorruptLog, match=rf"database_tuning_record.json, line {len(lines)}"):
        replay(W, host, root)


def test_damaged_trace_is_a_corrupt_log(log_copy, host):
    root, folder = log_copy
    path = folder / "database_tuning_record.json"

    def rename_block(node):  # every record now schedules a block the workload does not have
        if isinstance(node, list):
            return [rename_block(x) for x in node]
        return "no_such_block" if node == "C" else node

    rows = [json.loads(line) for line in path.read_text().splitlines()]
    damaged = [json.dumps([r[0], [rename_block(r[1][0]), *r[1][1:]]]) for r in rows]
    path.write_text("\n".join(damaged) + "\n")
    with pytest.raises(CorruptLog, match="the best record does not apply to this workload"):
        replay(W, host, root)


def test_tensorized_traces_are_recognised(host):
    from tvm_ext import schedules as S

    generic = S.schedule(K.matmul(32, 32, 32), host)
    assert not uses_tensorize(generic.trace.as_json())
    gpu = S.schedule(K.matmul(64, 64, 64, "float16"), {"kind": "cuda", "arch": "sm_90"})
    assert uses_tensorize(gpu.trace.as_json())  # WMMA: needs our CUDA intrinsics registered


@pytest.mark.slow  # ~13 s: a fresh interpreter importing TVM (the fast tier replays in-process)
def test_tensorized_log_replays_in_a_fresh_process(tmp_path, host):
    # A fresh process has none of our intrinsics registered until replay registers them.
    from conftest import cpu_has

    if not cpu_has("avx512bf16", host):
        pytest.skip("this CPU has no AVX512-BF16: no tensorized hand schedule to log")
    w = K.matmul(64, 64, 64, "bfloat16")
    tune(w.func, host, trials=2, batch=2, seed=0, log_dir=tmp_path, progress=False)
    (folder,) = find_logs(tmp_path)
    path = folder / "database_tuning_record.json"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    kept = [r for r in rows if uses_tensorize(r[1][0])]  # the hand schedule's record
    assert kept, "the bf16 hand schedule is tensorized and always measured first"
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    code = (
        "from tvm_ext import kernels as K, host_target\n"
        "from tvm_ext.kernel_tuner.replayer import replay\n"
        "r = replay(K.matmul(64, 64, 64, 'bfloat16').func, host_target(), log_dir=%r)\n"
        "print(r.measurement.max_rel_error)\n" % str(tmp_path)
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split()[-1]) < 1e-3


def test_replay_applies_the_record_the_manifest_names(log_copy, host):
    # tune() may return the hand schedule over a record timed faster earlier (it times both
    # side by side); the manifest then names that record and replay must apply it.
    from tvm_ext.kernel_tuner.replayer import apply_logged_trace as apply_trace

    root, folder = log_copy
    rows = [json.loads(line) for line in (folder / "database_tuning_record.json").open()]
    means = [sum(r[1][1]) / len(r[1][1]) for r in rows]
    slowest = max(range(len(rows)), key=lambda i: means[i] if means[i] < FAILED_SECONDS else -1)
    m = read_manifest(folder)
    for line, expected in ((slowest + 1, apply_trace(W.func, rows[slowest][1][0])), (None, None)):
        m["best_record"] = line
        (folder / "manifest.json").write_text(json.dumps(m))
        got = replay(W, host, root).mod
        if expected is not None:
            assert tvm_ffi.structural_equal(got, expected.mod)
    for bad, match in ((len(rows) + 5, "past the last record"), ("3", "not a line number")):
        m["best_record"] = bad
        (folder / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(CorruptLog, match=match):
            replay(W, host, root)


def test_corrupt_manifest(log_copy, host):
    root, folder = log_copy
    (folder / "manifest.json").write_text("{")
    with pytest.raises(CorruptLog, match="manifest.json, line 1"):
        replay(W, host, root)


def test_other_tvm_version_warns_but_replays(log_copy, host):
    root, folder = log_copy
    m = read_manifest(folder)
    m["tvm_version"] = "0.26.0"
    (folder / "manifest.json").write_text(json.dumps(m))
    with pytest.warns(LogVersionWarning, match="TVM 0.26.0"):
        assert replay(W, host, root).measurement.max_rel_error < 1e-4


def test_report_table(tuned, machine):
    root, _ = tuned
    table = report(root, machine)
    assert list(table["workload"]) == [W.key]
    assert table["best GFLOP/s"].iloc[0] > 0 and 0 < table["% peak"].iloc[0] < 200


def test_report_uses_the_peak_recorded_with_each_log(tuned, tmp_path, machine, host):
    root, result = tuned
    dst = tmp_path / "logs"
    shutil.copytree(root, dst)
    (mine,) = find_logs(dst)
    m = read_manifest(mine)
    peak = result.measurement.gflops / result.measurement.peak_fraction  # the tune's model
    assert m["peak_gflops"] == pytest.approx(peak)  # stored at tune time
    elsewhere = "llvm-other-cpu-2c"  # never this host's key, whatever the CPU
    other = dst / elsewhere / mine.name  # a log of another CPU, its own peak recorded
    shutil.copytree(mine, other)
    (other / "manifest.json").write_text(json.dumps(m | {"target_key": elsewhere,
                                                          "peak_gflops": 1000.0}))  # fmt: skip
    old = dst / elsewhere / "older"  # another CPU's log from before the field
    shutil.copytree(mine, old)
    (old / "manifest.json").write_text(json.dumps({k: v for k, v in m.items() if k != "peak_gflops"}
                                                  | {"target_key": elsewhere}))  # fmt: skip
    table = report(dst, machine, host)
    rows = dict(zip(map(str, find_logs(dst)), table["% peak"]))
    assert rows[str(other)] == pytest.approx(100 * m["best_gflops"] / 1000.0)
    assert rows[str(old)] == "n/a"
    assert rows[str(mine)] == pytest.approx(100 * m["best_gflops"] / m["peak_gflops"])
    assert len(table) == 3


def test_dataset_caches_in_the_user_cache_not_in_the_log(tuned, tmp_path, monkeypatch, machine):
    from tvm_ext.cost import dataset

    root, _ = tuned
    dst = tmp_path / "logs"
    shutil.copytree(root, dst)
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path / "cache"))
    # The session's model prices the rows (a fresh cache directory would probe the host again).
    first = dataset([dst], machine=machine)
    assert not list(dst.rglob("features-*")), "a cache was written into the log folder"
    assert len(list((tmp_path / "cache").rglob("features-*.csv.gz"))) == 1
    assert len(dataset([dst], machine=machine)) == len(first)  # read back from the cache
