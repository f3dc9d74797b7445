"""The device side of every distributed strategy, and the client's dispatch of it.

- ``device_run`` / ``dispatch`` / ``step_loop``: the life of a cluster run (setup tasks, K-step
  tasks pinned to their workers, gathering the variables, a dead or silent device named with
  its step); a strategy describes its part as a :class:`~workbench.parallel.device_run.DevicePlan`.
- ``loop_run``: what the client's step loops take (the run as they read it, each round's
  tasks, where the rounds pause for a checkpoint).
- ``worker_spec``: what each device is given once.
- ``collectives/``: ring, hierarchical-copy and reduce-to-one all-reduce, fusion buckets,
  the compression codecs (fp16/bf16 with loss scaling, top-k, PowerSGD), over the transports
  of ``workbench.runtime``.
- ``towers``: one replica's forward and backward built into a client graph on its device.
- ``data_parallel/``, ``parameter_server/``, ``pipeline/``, ``model_parallel/``: what a device
  of each strategy family holds and does each step; the parameter-server and in-graph
  programs are cut from one client graph by ``place`` and ``partition``.
- ``custom_loops/``: the device side of ``strategy.run`` and ``ClusterCoordinator``.

What flows in: a :class:`~workbench.training.job.TrainingJob` and a plan from the strategy's
definition (``workbench.strategies``). What flows out: the trained variables and, through the
event log, what every device did and when.
"""
