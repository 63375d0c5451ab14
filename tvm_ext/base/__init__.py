"""Layer 0: the one door to TVM (``tvm_api``), the error family (``errors``) and the host's
thread count (``host_threads``). Imports nothing else of the package."""
