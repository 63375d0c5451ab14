"""TVM RPC trackers and servers for tests, each in its own process group.

TVM's tracker and server each spawn a ``tvm.exec.popen_worker`` child that outlives a kill of
its parent and keeps listening; started with ``start_new_session=True``, the whole group is
signalled and checked gone, so no test leaves one behind. Each process gets a temporary
folder of its own as ``TMPDIR`` (a server keeps its uploads in a folder it removes only when
it exits cleanly, never when its group is killed: each test run left one in /tmp), removed
when the process is stopped.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil

from tvm_ext.hardware.device import Tracker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command: str | list[str], env: dict | None = None, cwd=None) -> subprocess.Popen:
    """A process (a shell-like command line or an argv) in a new process group."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    scratch = tempfile.mkdtemp(prefix="tvm-ext-rpc-farm-")
    proc = subprocess.Popen(
        argv,
        env={**os.environ, **(env or {}), "TMPDIR": scratch},
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    proc.scratch = scratch
    return proc


def group_members(pgid: int) -> list[int]:
    """Live processes of the process group ``pgid``."""
    members = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def stop(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Stop ``proc`` and every process of its group (its popen_worker children included)."""
    pgid = proc.pid  # a session leader's group id is its pid
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.time() + timeout_s
        while time.time() < deadline and group_members(pgid):
            time.sleep(0.1)
        if not group_members(pgid):
            break
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    left = group_members(pgid)
    assert not left, f"processes {left} of group {pgid} survived SIGKILL"
    if getattr(proc, "scratch", None):
        shutil.rmtree(proc.scratch, ignore_errors=True)


def tracker_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "tvm.exec.rpc_tracker", "--host", "127.0.0.1",
            "--port", str(port), "--port-end", str(port + 1)]  # fmt: skip


def server_argv(tracker_port: int, key: str) -> list[str]:
    port = free_port()
    return [sys.executable, "-m", "tvm.exec.rpc_server", "--tracker", f"127.0.0.1:{tracker_port}",
            "--key", key, "--host", "127.0.0.1", "--port", str(port),
            "--port-end", str(port + 50)]  # fmt: skip


def wait_for(tracker: Tracker, servers: int, timeout_s: float = 60.0) -> None:
    """Wait until the tracker answers and has ``servers`` servers under its key."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if tracker.servers().get(tracker.key, 0) >= servers:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise TimeoutError(f"{servers} server(s) for {tracker.key!r} did not register in {timeout_s} s")
