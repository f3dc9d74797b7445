"""A strategy as a contributor would add one: this module alone declares it (name, its own
option, its rules, how it trains, what it adds to the summary); registering it is one line,
``STRATEGIES.register(LoggedOneDevice())``."""

from __future__ import annotations

from workbench.config import Option
from workbench.strategies.one_device import OneDevice

LOG_EVERY = Option("log_every", int, 1, "record the loss every N steps", minimum=1)


class LoggedOneDevice(OneDevice):
    """One device, with the loss recorded every ``--log-every`` steps in the summary."""

    name = "logged-one-device"
    description = "one device, with a loss trail in the summary"
    options = (LOG_EVERY,)

    def summary_fields(self, config, log, devices):
        losses = log.scalars("loss")
        return {"loss_trail": [event.value for event in losses[:: config.log_every]]}
