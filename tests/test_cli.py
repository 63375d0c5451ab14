from tvm_ext.cli import main


def test_info_prints_target_and_sourced_machine_model(capsys, machine):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "num-cores" in out and "peak float32" in out and "probed" in out
    assert "bandwidth dram" in out


def test_lab_prints_a_table_with_parity_and_speed(capsys, machine):
    assert main(["lab", "--size", "64"]) == 0
    out = capsys.readouterr().out
    assert "naive" in out and "lecture cpu" in out and "ok (" in out
    assert "gflops" in out and "pct_peak" in out
