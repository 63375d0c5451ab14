"""The notebooks run end to end in quick mode (small shapes), as a reader would run them.

A notebook asserts what it shows (03_replay: a changed workload and a torn record are each
refused with their own error, naming what differs), so a cell that raised is a failure here."""

import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(HERE.glob("*.ipynb"))


# The longest quick runs go to the slow tier (`.ci/run` runs it): 05 tunes a model with
# ours and with stock `tune_relax` (~110 s; `test_model_tune.py` and `test_tune_promises.py`
# cover its API in the fast tier), 02 trains and evaluates every policy on the shipped dataset
# (~55 s; `test_policies.py`, `test_heldout.py`), 04 compiles every zoo model and profiles
# torchvision's resnet18 (~45 s; `test_models.py`, `test_torch_models.py`, `test_rules.py`),
# 01 runs the lab's three schedules and a tune (~14 s; `test_cli.py`'s lab and tune tests).
SLOW = {
    "01_schedule_three_ways.ipynb",
    "02_cost_policies.ipynb",
    "04_models.ipynb",
    "05_tune_a_model.ipynb",
}
PARAMS = [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW else p for p in NOTEBOOKS]


@pytest.mark.parametrize("path", PARAMS, ids=lambda p: p.name)
def test_notebook_runs_in_quick_mode(path, monkeypatch, tmp_path):
    monkeypatch.setenv("TVM_EXT_NOTEBOOK_QUICK", "1")
    nb = nbformat.read(path, as_version=4)
    # Run in a scratch copy of the folder so figures written in quick mode do not replace
    # the full-run figures that are committed.
    NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors


def test_committed_notebooks_are_what_the_build_script_writes():
    """Each notebook's cells are ``notebooks/_build.py``'s (the one home of their text): a cell
    edited in the notebook alone would be lost at the next rebuild."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_build", HERE / "_build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert sorted(build.NOTEBOOKS) == [p.name for p in NOTEBOOKS]
    for name, cells in build.NOTEBOOKS.items():
        committed = nbformat.read(HERE / name, as_version=4).cells
        assert [(c.cell_type, c.source) for c in committed] == [
            (c.cell_type, c.source) for c in cells
        ], name
