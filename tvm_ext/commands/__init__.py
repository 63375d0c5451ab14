"""Layer 7: what people run: the ``tvm-ext`` command line (``cli``) and the mini-lab (``lab``)."""
