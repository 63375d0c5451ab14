"""Where a built module runs: this host, or a device reached through TVM's RPC tracker.

A :class:`Tracker` names a device kind (the key its servers register under). Its
:meth:`~Tracker.problem` asks the tracker, within ``timeout_s``, whether a server is there:
TVM's own client retries a refused connection for 60 s and waits without end for a key no
server carries, so nothing here calls it before that check passed. A :class:`Runtime` runs
and times built modules on this host or in a session on a device, with the same calls.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import tempfile
import uuid
import warnings
from dataclasses import dataclass

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import DeviceError
from tvm_ext.hardware.target import target_cores

# TVM's RPC client (tvm.rpc), reached through the door's MetaSchedule, whose runner uses it.
_rpc = tvm_api.ms.runner.config.rpc


@dataclass(frozen=True)
class Tracker:
    """Devices registered under ``key`` at the RPC tracker ``host:port``."""

    host: str
    port: int
    key: str
    timeout_s: float = 10.0  # how long the tracker may take to answer a check
    session_timeout_s: int = 60  # a server ends a session older than this

    @property
    def where(self) -> str:
        return f"device '{self.key}' via the RPC tracker at {self.host}:{self.port}"

    def summary(self) -> dict:
        """The tracker's summary (servers and queues), within ``timeout_s``; OSError or
        ValueError when it does not answer as a tracker."""
        with socket.create_connection((self.host, self.port), timeout=self.timeout_s) as sock:
            sock.settimeout(self.timeout_s)
            base = _rpc.base
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            magic = struct.unpack("<i", base.recvall(sock, 4))[0]
            if magic != base.RPC_TRACKER_MAGIC:
                raise ValueError(f"{self.host}:{self.port} answers, but not as an RPC tracker")
            base.sendjson(sock, [base.TrackerCode.SUMMARY])
            code, summary = base.recvjson(sock)
        if code != base.TrackerCode.SUCCESS or not isinstance(summary, dict):
            raise ValueError(f"the tracker at {self.host}:{self.port} answered {code!r}")
        return summary

    def servers(self) -> dict[str, int]:
        """How many servers the tracker has per key."""
        counts: dict[str, int] = {}
        for item in self.summary().get("server_info", []):
            key = str(item.get("key", "")).split(":", 1)[-1]
            counts[key] = counts.get(key, 0) + 1
        return counts

    def problem(self) -> str | None:
        """Why no session can be had now (None when a server is registered under the key)."""
        try:
            counts = self.servers()
        except (OSError, ValueError, RuntimeError) as err:
            return (
                f"the RPC tracker at {self.host}:{self.port} does not answer "
                f"({type(err).__name__}: {err}); is `<python with TVM> -m tvm.exec.rpc_tracker "
                f"--port {self.port} --port-end {self.port + 1}` running there?"
            )
        if not counts.get(self.key):
            others = ", ".join(f"{k!r} x{n}" for k, n in sorted(counts.items())) or "none"
            return (
                f"the RPC tracker at {self.host}:{self.port} has no server for key "
                f"{self.key!r} (servers it has: {others}); start one on the device with "
                f"`<python with TVM> -m tvm.exec.rpc_server --tracker {self.host}:{self.port} "
                f"--key {self.key}`"
            )
        return None

    def check(self) -> None:
        """Raise :class:`DeviceError` saying what is missing, unless a server is there."""
        problem = self.problem()
        if problem is not None:
            raise DeviceError(f"cannot measure on {self.where}: {problem}")

    def session(self):
        """An RPC session on one of the key's servers (waits while all of them are busy)."""
        self.check()
        try:
            tracker = _rpc.connect_tracker(self.host, self.port)
            return tracker.request(self.key, priority=1, session_timeout=self.session_timeout_s)
        except (OSError, RuntimeError) as err:
            raise DeviceError(f"cannot open a session on {self.where}: {err}") from err


class Runtime:
    """Loads, runs and times built modules on this host (``tracker`` None) or on a device."""

    def __init__(self, target, tracker: Tracker | None = None):
        self.tracker = tracker
        kind = str(target.kind.name)
        if tracker is None:
            self.session = None
            self.dev = tvm_api.cuda(0) if kind == "cuda" else tvm_api.cpu(0)
            if not self.dev.exist:
                raise DeviceError(f"no {kind} device on this machine to measure on")
            self.threads = target_cores(target) if kind == "llvm" else 1
        else:
            self.session = tracker.session()
            self.dev = self.session.cuda(0) if kind == "cuda" else self.session.cpu(0)
            # A server sizes its own thread pool (TVM_NUM_THREADS where it was started).
            self.threads = int(self.session.get_function("runtime.NumThreads")())
            cores = target_cores(target) if kind == "llvm" else self.threads
            if cores != self.threads:
                warnings.warn(
                    f"{tracker.where} runs {self.threads} threads, the target says "
                    f"num-cores={cores}: start its server with TVM_NUM_THREADS={cores}, or "
                    "give the target the device's cores",
                    UserWarning,
                    stacklevel=3,
                )

    @property
    def where(self) -> str:
        return "this host" if self.tracker is None else self.tracker.where

    def load(self, lib):
        """``lib`` ready to run here: itself on this host, uploaded and loaded on a device."""
        if self.session is None:
            return lib
        with tempfile.TemporaryDirectory(prefix="tvm-ext-upload-") as tmp:
            name = f"tvm-ext-{uuid.uuid4().hex}.{tvm_api.tar.output_format}"
            path = os.path.join(tmp, name)
            lib.export_library(path, fcompile=tvm_api.tar)
            self.session.upload(path)
        return self.session.load_module(name)

    def threads_context(self):
        """This host's thread pool set to the target's threads; a device keeps its own."""
        if self.session is None:
            return tvm_api.threads(self.threads)
        return contextlib.nullcontext()
