"""Layer 1: what gets scheduled. ``kernels`` is the kernel suite (with ``kernel_base``,
``kernels_rows``, ``kernels_script``: a workload's PrimFunc, inputs and numpy reference),
``models`` the model zoo (with ``model_base``, ``models_transformer``, ``models_feedforward``),
``models_torch`` the torch and onnxruntime peers of the zoo's models.
"""
