"""A MetaSchedule builder whose worker processes live as long as the tune.

MetaSchedule's LocalBuilder starts fresh worker processes for every batch (each importing
TVM, and each stock one importing every tensor intrinsic: 19-43 s here) and checks its
functions in yet another pool when it is made. This builder starts ``workers`` processes
once and builds every batch in them; a worker whose build hangs is killed and replaced.
"""

from __future__ import annotations

import json
import os
import tempfile

from tvm_ext.base import tvm_api

ms = tvm_api.ms


def _build_one(mod_json: str, target_json: str) -> str:
    """Build and export one candidate in a worker; returns the artifact's path."""
    tar = tvm_api.tar
    mod = tvm_api.ir.load_json(mod_json)
    lib = tvm_api.build_for_tuning(mod, tvm_api.Target(json.loads(target_json)))
    path = os.path.join(tempfile.mkdtemp(prefix="tvm-ext-build-"), "mod." + tar.output_format)
    lib.export_library(path, fcompile=tar)
    return path


def _warm() -> None:
    """Worker initializer: pay TVM's import before the first build arrives."""
    tvm_api.Target({"kind": "llvm"})


@tvm_api.derived_object
class PersistentBuilder(ms.builder.PyBuilder):
    """Builds candidates in ``workers`` long-lived processes with a per-build ``timeout_s``.

    The workers are TVM's own Popen workers (``python -m tvm.exec.popen_worker``), so a user
    script needs no ``if __name__ == "__main__"`` guard; a build that times out has its worker
    killed and replaced.
    """

    def __init__(self, workers: int, timeout_s: float = 120.0):
        super().__init__()
        self.workers, self.timeout_s = workers, timeout_s
        self.pool = tvm_api.PopenPoolExecutor(max_workers=workers, timeout=timeout_s)
        # Start every worker now: their TVM import overlaps the caller's own work.
        self._warming = [self.pool.submit(_warm) for _ in range(workers)]

    def wait_ready(self) -> None:
        """Block until every worker has started (imported TVM)."""
        for future in self._warming:
            future.result()

    def build(self, build_inputs):
        futures = [
            self.pool.submit(
                _build_one, tvm_api.ir.save_json(inp.mod), tvm_api.json_of_target(inp.target)
            )
            for inp in build_inputs
        ]
        results = []
        for future in futures:
            try:
                results.append(ms.builder.BuilderResult(future.result(), None))
            except TimeoutError:
                results.append(
                    ms.builder.BuilderResult(
                        None, f"PersistentBuilder: timeout, killed after {self.timeout_s} s"
                    )
                )
            except Exception as err:  # noqa: BLE001  recorded as this candidate's failure
                results.append(ms.builder.BuilderResult(None, f"PersistentBuilder: {err!r}"))
        return results

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)
