"""A discrete-event simulator of one training step, pure: programs and links in, a timeline out.

What flows in: each device's program (an ordered list of compute, send and receive actions on
one or more streams) and a link model (latency and bandwidth between any two devices). What
flows out: every action's start and end, each device's busy time and the step's makespan. No
clocks, no I/O: the same inputs give the same timeline, so tests are literal.
"""
