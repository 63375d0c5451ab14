"""Layer 0: the one door to TVM (``tvm_api``), the error family (``errors``), the host's
thread count (``host_threads``) and the count of a TIR expression's arithmetic
(``op_count``). Imports nothing else of the package."""
