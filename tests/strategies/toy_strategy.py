"""A strategy as a contributor would add one: this module alone declares it (name, its own
option and the dataclass that types it, its rules, how it trains, what it adds to the
summary); registering it is one line, ``STRATEGIES.register(LoggedOneDevice())``."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.config import Option, StrategyOptions
from workbench.strategies.one_device import OneDevice

LOG_EVERY = Option("log_every", int, 1, "record the loss every N steps", minimum=1)


@dataclass(frozen=True)
class LoggedOptions(StrategyOptions):
    log_every: int


class LoggedOneDevice(OneDevice):
    """One device, with the loss recorded every ``--log-every`` steps in the summary."""

    name = "logged-one-device"
    description = "one device, with a loss trail in the summary"
    options = (LOG_EVERY,)
    options_type = LoggedOptions

    def summary_fields(self, config, log, devices):
        losses = log.scalars("loss")
        every = config.options_of(LoggedOptions).log_every
        return {"loss_trail": [event.value for event in losses[::every]]}
