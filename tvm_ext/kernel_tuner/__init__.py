"""Layer 5: MetaSchedule search machinery, tune and replay."""
