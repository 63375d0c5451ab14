"""Layer 0: readers of built code, pure text parsing that imports nothing else of the package.

``asm_text`` reads x86-64 assembly as text, ``asm_loops`` and ``machine_blocks`` say how often its
blocks run and what they ask of the core, ``machine_code`` sums what stage 2 of the cut needs
(:func:`~.machine_code.read_module`), ``llvm_ir`` reads the optimized LLVM IR and ``ir_chains``
finds the reduction chains in it.
"""
