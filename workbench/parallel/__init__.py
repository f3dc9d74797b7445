"""Parallel strategies, one module each, named in one explicit registry (``registry.py``).

What flows in: a :class:`~workbench.training.job.TrainingJob` (model, optimizer, data sampler,
schedule, steps). What flows out: the trained variables and, through the event log, what every
device did and when. Every synchronous strategy must end with the parameters ``one-device``
ends with (DESIGN 3.2).
"""
