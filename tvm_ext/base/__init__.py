"""Layer 0: the one door to TVM (`tvm_api`) and the error family (`errors`)."""
