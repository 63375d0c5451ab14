"""Layer 1: facts about targets, machines and kernels, and measurement.

``target``, ``machine``, ``kernels`` (with ``kernel_base``, ``kernels_rows``, ``kernels_script``),
``probe_kernels``, ``measure``.
"""
