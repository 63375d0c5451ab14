from tvm_ext.faces.cli import main


def test_info_prints_target_and_sourced_machine_model(capsys, machine):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "num-cores" in out and "peak float32" in out and "probed" in out
    assert "bandwidth dram" in out


def test_lab_prints_a_table_with_parity_and_speed(capsys, machine):
    assert main(["lab", "--size", "64", "--trials", "0"]) == 0
    out = capsys.readouterr().out
    assert "naive" in out and "lecture cpu" in out and "ok (" in out
    assert "gflops" in out and "pct_peak" in out


def test_tune_command(capsys, tmp_path, machine):
    assert (
        main(["tune", "matmul", "32", "32", "32", "--trials", "8", "--log-dir", str(tmp_path)]) == 0
    )
    out = capsys.readouterr().out
    assert "parity ok" in out and "GFLOP/s" in out and "dropped by the bound" in out


def test_tune_command_rejects_bad_shapes():
    import pytest

    with pytest.raises(SystemExit, match="matmul takes 3 sizes"):
        main(["tune", "matmul", "32", "32"])
    with pytest.raises(SystemExit, match="unknown kernel 'gemm'"):
        main(["tune", "gemm", "32"])
