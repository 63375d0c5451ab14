"""A tuned model's manifest: ``<log root>/<target key>/models/<model key>.json`` lists the
model's tasks (each a kernel log folder beside it, under the same target key), where each
task's schedule came from, and the model's figures. One writer and one reader."""

from __future__ import annotations

import datetime
import json
import pathlib

from tvm_ext.base.errors import CorruptLog
from tvm_ext.base.files import atomic_write
from tvm_ext.records.logs import cpu_model, read_json, target_key

MODELS_FOLDER = "models"
MODEL_MANIFEST_SCHEMA = 1


def model_manifest_path(root, target, key: str) -> pathlib.Path:
    return pathlib.Path(root) / target_key(target) / MODELS_FOLDER / f"{key}.json"


def write_model_manifest(root, target, key: str, figures: dict) -> pathlib.Path:
    """Write the manifest of model ``key`` tuned for ``target`` atomically: ``figures`` (its
    ``tasks``, each naming its ``log``, and the model's figures) with the schema, the target,
    the CPU and the date. Returns its path."""
    tasks = figures.get("tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, dict) and "log" in t for t in tasks):
        raise ValueError("a model manifest needs tasks: a list of dicts, each naming its log")
    path = model_manifest_path(root, target, key)
    record = {
        "schema": MODEL_MANIFEST_SCHEMA,
        "model": key,
        "target_key": target_key(target),
        "cpu_model": cpu_model(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **figures,
    }
    atomic_write(path, json.dumps(record, indent=1, default=float))
    return path


def read_model_manifest(path) -> dict:
    """The manifest at ``path``, checked: a :class:`~tvm_ext.base.errors.CorruptLog` naming
    the file when it is unreadable, not JSON, of another schema, or lists no tasks."""
    path = pathlib.Path(path)
    data = read_json(path)
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema != MODEL_MANIFEST_SCHEMA:
        raise CorruptLog(
            f"{path}: model manifest schema {schema!r}, expected {MODEL_MANIFEST_SCHEMA}"
        )
    tasks = data.get("tasks")
    if not isinstance(tasks, list) or not all(isinstance(t, dict) and "log" in t for t in tasks):
        raise CorruptLog(f"{path}: 'tasks' must be a list of tasks, each naming its log")
    return data


def tuned_targets(root, key: str) -> list[str]:
    """The target keys under ``root`` that hold a manifest of model ``key``."""
    return sorted(
        p.parent.parent.name for p in pathlib.Path(root).glob(f"*/{MODELS_FOLDER}/{key}.json")
    )


__all__ = [
    "MODELS_FOLDER",
    "MODEL_MANIFEST_SCHEMA",
    "model_manifest_path",
    "read_model_manifest",
    "tuned_targets",
    "write_model_manifest",
]
