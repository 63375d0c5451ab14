"""A MetaSchedule builder whose worker processes live as long as the tune.

MetaSchedule's LocalBuilder starts fresh worker processes for every batch (each importing
TVM, and each stock one importing every tensor intrinsic: 19-43 s here) and checks its
functions in yet another pool when it is made. This builder starts ``workers`` processes
once and builds every batch in them; a worker whose build hangs is killed and replaced.

With a stage-2 cut attached (:meth:`PersistentBuilder.attach`, a
:class:`~tvm_ext.kernel_tuner.pruning.PostBuildCut`) each worker also reads the machine code of
the module it built (:func:`~tvm_ext.built_code.machine_code.read_module`, from LLVM's
assembly and optimized IR of the same module, before the artifact is exported); the cut
then decides which candidates are worth running, and a withheld one is returned as a build
without an artifact.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from tvm_ext.base import tvm_api
from tvm_ext.built_code.machine_code import CodeFacts, read_module

ms = tvm_api.ms


def _build_one(mod_json: str, target_json: str, read_code: bool = False, root: str | None = None):
    """Build and export one candidate in a worker; returns the artifact's path and, with
    ``read_code``, the facts of its machine code as a dict (None when there is no LLVM
    assembly to read: a non-CPU target)."""
    tar = tvm_api.tar
    mod = tvm_api.ir.load_json(mod_json)
    target = tvm_api.Target(json.loads(target_json))
    lib = tvm_api.build_for_tuning(mod, target)
    code = None
    if read_code and target.kind.name == "llvm":
        try:
            code = read_module(tvm_api.assembly(lib), tvm_api.llvm_ir(lib)).to_dict()
        except ValueError:  # no assembly to read: the candidate is run, stage 2 abstains
            code = None
    folder = tempfile.mkdtemp(prefix="tvm-ext-build-", dir=root)
    path = os.path.join(folder, "mod." + tar.output_format)
    lib.export_library(path, fcompile=tar)
    return path, code


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
        self.cuts: list = []  # stage-2 cuts attached (one per search running through us)
        self.pool = tvm_api.PopenPoolExecutor(max_workers=workers, timeout=timeout_s)
        # Every artifact lives under one folder of ours, removed at shutdown: the runner
        # deletes an artifact's file, not its folder, and a failed run deletes nothing.
        self.root = tempfile.mkdtemp(prefix="tvm-ext-builds-")
        # Start every worker now: their TVM import overlaps the caller's own work.
        self._warming = [self.pool.submit(_warm) for _ in range(workers)]

    def wait_ready(self) -> None:
        """Block until every worker has started (imported TVM)."""
        for future in self._warming:
            future.result()

    def attach(self, cut) -> None:
        """Review every batch with ``cut`` (a PostBuildCut) after it is built."""
        self.cuts.append(cut)

    def detach(self, cut) -> None:
        if cut in self.cuts:
            self.cuts.remove(cut)

    def build(self, build_inputs):
        read_code = any(cut.enabled for cut in self.cuts)
        futures = [
            self.pool.submit(
                _build_one,
                tvm_api.ir.save_json(inp.mod),
                tvm_api.json_of_target(inp.target),
                read_code,
                self.root,
            )
            for inp in build_inputs
        ]
        built = [self._result(future) for future in futures]
        codes = [CodeFacts.from_dict(code) if code is not None else None for _, code, _ in built]
        reasons = next(
            (r for r in (cut.review(build_inputs, codes) for cut in self.cuts) if r is not None),
            [None] * len(built),
        )
        results = []
        for (path, _, error), reason in zip(built, reasons):
            if reason is not None and path is not None:
                shutil.rmtree(os.path.dirname(path), ignore_errors=True)
                path, error = None, reason
            results.append(ms.builder.BuilderResult(path, error))
        return results

    def _result(self, future):
        """(artifact path, code facts dict, error) of one build."""
        try:
            path, code = future.result()
            return path, code, None
        except TimeoutError:
            return None, None, f"PersistentBuilder: timeout, killed after {self.timeout_s} s"
        except Exception as err:  # noqa: BLE001  recorded as this candidate's failure
            return None, None, f"PersistentBuilder: {err!r}"

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True)
        shutil.rmtree(self.root, ignore_errors=True)
