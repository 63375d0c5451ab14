"""Layer 6: what people run (command line, lab)."""
