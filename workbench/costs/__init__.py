"""Cost models: how long a node takes on a device, how long a tensor takes from A to B.

What flows in: a calibration (times measured on the real devices, sans-IO data) or a described
device (peak FLOP/s, memory bandwidth). What flows out: seconds, for the placer and the
planner. Estimates of FLOPs and bytes per node live here too.
"""
