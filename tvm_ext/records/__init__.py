"""Layer 3: the tuning-log format, one reader and one writer for each file a tune leaves."""
