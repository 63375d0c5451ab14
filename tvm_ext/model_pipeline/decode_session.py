"""A compiled decode step run token after token, its KV cache updated in place.

A decode step (:func:`~tvm_ext.workloads.decode.build_decode`'s Llama,
:func:`~tvm_ext.workloads.models_transformer.decoder_step`'s zoo block) takes the token (its
id, or its hidden state) and, per layer, the keys and values of the ``n`` tokens before it
(``(n, kv_heads, head_dim)``, sequence-major), and returns the token's output and its own row
of the cache (``(layers, 2, kv_heads, head_dim)``). :class:`DecodeSession` keeps the cache
in one buffer of a fixed capacity, ``(2 x layers, capacity, kv_heads, head_dim)``: each step
passes the first ``n`` rows of each layer's keys and values as views of it (a prefix of a
sequence-major buffer is contiguous: no copy) and writes the returned row into row ``n``. A
step then moves one row of cache, whatever its length; the cache is never copied,
concatenated or reallocated.
"""

from __future__ import annotations

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import InputError
from tvm_ext.model_pipeline.boundary import check_inputs
from tvm_ext.model_pipeline.compiled import Compiled


class DecodeSession:
    """Run ``compiled`` (a decode step, see the module docstring) over a cache of at most
    ``capacity`` tokens (default: as many as its symbolic length allows, plus the one a step
    at the longest adds; a step compiled for one length: that length plus one)."""

    def __init__(self, compiled: Compiled, capacity: int | None = None):
        specs = compiled.input_specs
        if len(specs) < 3 or len(specs) % 2 == 0 or any(len(s[0]) != 3 for s in specs[1:]):
            raise InputError(
                f"{compiled.name}: a decode session takes a step whose inputs are a token and "
                f"per layer its keys and values (n, kv_heads, head_dim); got {len(specs)} inputs"
            )
        (length, *row), dtype = specs[1]
        self.compiled, self.row, self.dtype = compiled, tuple(row), dtype
        self.capacity = capacity or self._longest(length) + 1
        if self.capacity < 2:
            raise InputError(f"{compiled.name}: a cache of {self.capacity} tokens holds no step")
        # the buffer as numpy sees it, and each layer's keys (values) as a TVM tensor of it
        self._rows, self._parts = tvm_api.shared_tensors(
            (len(specs) - 1, self.capacity, *self.row), dtype
        )
        self.length = 0

    def _longest(self, length) -> int:
        """The longest cache the step takes: its static length, or its symbolic length's
        declared upper bound."""
        if isinstance(length, int):
            return length
        _, high = self.compiled.bounds.get(length, (None, None))
        if high is None:
            raise InputError(
                f"{self.compiled.name}: the cache length {length} has no declared upper bound; "
                "pass capacity="
            )
        return int(high)

    def prefill(self, cache: np.ndarray) -> None:
        """Start from ``cache``, ``(layers, 2, n, kv_heads, head_dim)`` (keys then values per
        layer, as :func:`~tvm_ext.workloads.decode.prefill_cache` gives it)."""
        cache = np.asarray(cache)
        layers = len(self._parts) // 2
        if cache.ndim != 5 or cache.shape[:2] != (layers, 2) or cache.shape[3:] != self.row:
            wanted = (layers, 2, "n", *self.row)
            raise InputError(
                f"{self.compiled.name}: a cache of {wanted} takes no array of shape {cache.shape}"
            )
        n = cache.shape[2]
        if n >= self.capacity:
            raise InputError(
                f"{self.compiled.name}: {n} cached tokens leave no room for a step in a "
                f"capacity of {self.capacity}"
            )
        self._rows[:, :n] = cache.reshape(2 * layers, n, *self.row)
        self.length = n

    def cache(self) -> np.ndarray:
        """A copy of the cache now, ``(layers, 2, length, kv_heads, head_dim)``."""
        rows = self._rows[:, : self.length]
        return rows.reshape(len(self._parts) // 2, 2, *rows.shape[1:]).copy()

    def step(self, token: np.ndarray) -> np.ndarray:
        """The output for ``token`` (the step's first input) after the cache; its keys and
        values become the cache's next row."""
        with tvm_api.threads(self.compiled.threads):
            hidden, _ = self.ready_step(token)()
        self.length += 1
        return hidden.numpy()

    def ready_step(self, token: np.ndarray):
        """A no-argument call of one step at the current length, its inputs checked and
        placed: what a benchmark times (the caller sets the threads: ``tvm_api.threads``).
        Each call writes the token's row into the same row ``length`` in place and leaves
        ``length`` as it is; it returns what the step does, the hidden state and that row
        (TVM tensors)."""
        n = self.length
        if n + 1 > self.capacity:
            raise InputError(
                f"{self.compiled.name}: the cache is full ({self.capacity} tokens); start a "
                "session with a larger capacity"
            )
        compiled = self.compiled
        token, *_ = check_inputs(compiled.name, compiled.input_names, compiled.input_specs,
                                 compiled.index_checks, [token, *self._rows[:, :n]],
                                 compiled.bounds)  # fmt: skip
        dev = tvm_api.cpu(0)
        arguments = [
            tvm_api.tensor(token, dev),
            *(tvm_api.prefix_view(part, (n, *self.row), self.dtype) for part in self._parts),
            *compiled.weights,
        ]
        entry, rows = compiled.vm[compiled.entry], self._rows[:, n]

        def call():
            hidden, new = entry(*arguments)
            rows[:] = np.from_dlpack(new).reshape(rows.shape)
            return hidden, new

        return call


__all__ = ["DecodeSession"]
