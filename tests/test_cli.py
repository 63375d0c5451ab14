import pathlib
import subprocess
import sys

import pytest

from tvm_ext.commands.cli import main
from tvm_ext.commands.report import report
from tvm_ext.records.logs import target_key

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_info_prints_target_and_sourced_machine_model(capsys, machine):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "num-cores" in out and "peak float32" in out and "probed" in out
    assert "bandwidth dram" in out


def test_lab_prints_a_table_with_parity_and_speed(capsys, machine):
    assert main(["lab", "--size", "64", "--trials", "0", "--model", "none"]) == 0
    out = capsys.readouterr().out
    assert "naive" in out and "lecture cpu" in out and "ok (" in out
    assert "gflops" in out and "pct_peak" in out
    assert "model:" not in out


def test_lab_model_section_compares_untuned_ours_and_torch(capsys, machine):
    assert (
        main(["lab", "--size", "32", "--trials", "0", "--model", "mlp", "--model-size", "small"])
        == 0
    )
    out = capsys.readouterr().out
    section = out[out.index("model: mlp/small/b1") :]
    rows = {c: [line for line in section.splitlines() if c in line] for c in CONTENDERS}
    assert all(len(r) == 1 for r in rows.values()), section
    assert "ok (" in rows["TVM untuned"][0] and "ok (" in rows["ours (rules)"][0]
    # torch installed: timed with parity; absent: says so
    assert "ok" in rows["torch eager"][0] or "not installed" in rows["torch eager"][0]


CONTENDERS = ("TVM untuned", "ours (rules)", "torch eager")


def test_tune_command(capsys, tmp_path, machine):
    assert (
        main(["tune", "matmul", "32", "32", "32", "--trials", "8", "--log-dir", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    assert "parity ok" in out and "GFLOP/s" in out and "dropped by the bound" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tune", "matmul", "32", "32"], "matmul takes 3 sizes (M, N, K), got 2"),
        (["tune", "gemm", "32"], "unknown kernel 'gemm'; choose one of"),
        (["tune", "matmul", "0", "4", "4"], "M=0 must be a positive int"),
        (["tune", "matmul", "4", "4", "4", "--trials", "0"], "trials=0 must be a positive int"),
        (["tune", "matmul", "4", "4", "4", "--dtype", "fp32"], "dtype='fp32' is not supported"),
        (
            ["tune", "matmul", "4", "4", "4", "--policy", "xgboost:/nonexistent/model.json"],
            "/nonexistent/model.json: cannot read a XGBoostPolicy",
        ),
        (["tune", "matmul", "4", "4", "4", "--policy", "best"], "--policy 'best': expected"),
        (["replay", "/nonexistent"], "/nonexistent: no such folder"),
        (["replay", str(ROOT / "tuning_logs")], "holds 10 logs, not one: pass one log folder"),
        (["report", "/nonexistent"], "/nonexistent: no such folder of tuning logs"),
    ],
)
def test_user_mistakes_are_one_line_and_exit_code_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"tvm-ext {argv[0]}: error: ") and message in err
    assert "\n" not in err and "Traceback" not in err


def test_the_installed_command_prints_no_traceback():
    done = subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "tvm-ext"), "replay", "/nonexistent"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "tvm-ext replay: error: /nonexistent: no such folder; pass a log folder "
        "<root>/<target>/<workload>"
    ]


def test_report_says_whether_each_log_replays_here(capsys, machine, host):
    from conftest import cpu_has

    assert main(["report", str(ROOT / "tuning_logs")]) == 0
    out = capsys.readouterr().out
    assert "replays here" in out and "% peak" in out
    # The shipped logs predate the recorded peak: a % of peak needs this host's machine model
    # and a log of this host's target (the CPU changes between machines).
    shipped = report(ROOT / "tuning_logs")
    assert (shipped["% peak"] == "n/a").all()
    here = report(ROOT / "tuning_logs", machine, host)
    mine = here["target"] == target_key(host)
    assert all(isinstance(v, float) for v in here.loc[mine, "% peak"])
    assert (here.loc[~mine, "% peak"] == "n/a").all()
    if not cpu_has("avx512f", host):
        assert out.count("no: needs avx512f") == 10
