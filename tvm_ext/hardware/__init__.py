"""Layer 1: the hardware. ``target`` builds the host and CUDA targets right, ``isa`` holds the
instruction-set facts a lower bound may rest on, ``machine_model`` is the roofline model of one
machine, ``machine_probes`` and ``probe_kernels`` measure it, ``machine`` caches it per CPU,
``device`` says where a built module runs (this host or a device behind an RPC tracker).
"""
