"""Layer 5: tuning one kernel. ``tuner`` is ``tune_kernel`` (search, measure, check parity),
``stages`` its steps, ``space``/``pruning``/``cost_models``/``prune_stats`` the MetaSchedule
pieces that rank and admissibly cut candidates, ``builder``/``session``/``remote`` build and run
them, ``replayer`` replays a frozen log without search, ``stock`` is stock MetaSchedule.
"""
