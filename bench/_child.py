"""A bench child process's result: the JSON it writes to ``--out``, in a temporary folder
removed afterwards (stdlib only: the parents that use it never load TVM themselves)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import tempfile


def child_json(cmd: list[str], **run_kwargs) -> dict:
    """Run ``cmd`` with ``--out <path>`` appended (``subprocess.run``, ``check=True``) and
    return the JSON the child wrote at ``path``; the folder holding it is removed either way."""
    with tempfile.TemporaryDirectory(prefix="tvm-ext-bench-") as folder:
        out = pathlib.Path(folder) / "result.json"
        subprocess.run([*cmd, "--out", str(out)], check=True, **run_kwargs)
        return json.loads(out.read_text())
