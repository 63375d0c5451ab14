"""Layer 6: whole models. ``compile`` schedules every PrimFunc of a Relax module with the IR
rules and checks parity (``compiled`` is the result), ``model_tasks`` extracts a model's kernels
as tuning tasks, ``task_scheduler`` shares a trial budget between them, ``model_tuner`` and
``model_replay`` tune and replay a model through the kernel tuner, ``stock`` is stock
MetaSchedule on a whole model.
"""
