"""The package's one atomic write, its cache folder, its int check and the model manifest's
reader and writer."""

import json

import platformdirs
import pytest

from tvm_ext.base.checks import checked_int
from tvm_ext.base.errors import CorruptLog
from tvm_ext.base.files import atomic_path, atomic_write, cache_dir
from tvm_ext.hardware.target import host_target
from tvm_ext.records.model_manifest import (
    model_manifest_path,
    read_model_manifest,
    tuned_targets,
    write_model_manifest,
)


def test_an_atomic_write_replaces_the_file_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "sub" / "f.json"
    atomic_write(path, "one")
    atomic_write(path, "two")
    assert path.read_text() == "two"
    assert [p.name for p in path.parent.iterdir()] == ["f.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError, match="half"):
        with atomic_path(path) as tmp:
            tmp.write_text("half of the new")
            raise RuntimeError("half written")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("TVM_EXT_CACHE_DIR")
    # unset: the user cache directory (the suite's guard stands in for it; never the real one)
    monkeypatch.setattr(platformdirs, "user_cache_dir", lambda app: str(tmp_path / app))
    assert cache_dir() == tmp_path / "tvm-ext"


@pytest.mark.parametrize(
    "value, minimum, message",
    [
        (0, 1, r"n=0 must be a positive int"),
        (True, 0, r"n=True must be an int >= 0"),
        (2.0, 1, r"n=2.0 must be a positive int"),
        (-1, 0, r"n=-1 must be an int >= 0 \(0: none\)"),
    ],
)
def test_checked_int_names_the_argument(value, minimum, message):
    with pytest.raises(ValueError, match=message):
        checked_int("n", value, minimum=minimum, note="0: none" if value == -1 else "")


def test_checked_int_takes_numpy_ints():
    import numpy as np

    assert checked_int("n", np.int64(3)) == 3 and type(checked_int("n", np.int64(3))) is int


def test_a_model_manifest_reads_back_what_was_written(tmp_path):
    target = host_target()
    tasks = [{"name": "t0", "log": "matmul_M8", "source": "rule"}]
    path = write_model_manifest(tmp_path, target, "m-1", {"tasks": tasks, "trials": 0})
    assert path == model_manifest_path(tmp_path, target, "m-1")
    data = read_model_manifest(path)
    assert data["tasks"] == tasks and data["model"] == "m-1" and data["trials"] == 0
    assert tuned_targets(tmp_path, "m-1") == [path.parent.parent.name]
    assert tuned_targets(tmp_path, "other") == []


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", r"line 1: not JSON"),
        (json.dumps({"schema": 99, "tasks": []}), r"model manifest schema 99, expected 1"),
        (json.dumps({"schema": 1, "tasks": [{"name": "t0"}]}), r"each naming its log"),
        (json.dumps([1, 2]), r"model manifest schema None"),
    ],
)
def test_a_corrupt_model_manifest_is_a_corrupt_log_naming_the_file(tmp_path, text, message):
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(CorruptLog, match=message) as err:
        read_model_manifest(path)
    assert str(path) in str(err.value)


def test_a_manifest_without_tasks_is_refused_before_writing(tmp_path):
    with pytest.raises(ValueError, match="each naming its log"):
        write_model_manifest(tmp_path, host_target(), "m", {"tasks": [{"name": "t0"}]})
    assert not any(tmp_path.rglob("*.json"))
