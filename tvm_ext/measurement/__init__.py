"""Layer 2: measuring a built kernel (``measure``): parity against its reference first, then
time, GFLOP/s and the share of the machine's peak. Uses the hardware and the workloads."""
