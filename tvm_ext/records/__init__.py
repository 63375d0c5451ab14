"""Layer 2: the tuning-log format (one reader, one writer, one trace replay)."""
