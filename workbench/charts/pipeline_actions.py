"""A pipeline stage's compute as the timeline draws it: the schedule's action a ``compute`` phase
ran (``PhaseEvent.action``: ``F3``, ``B3``, ``I3``, ``W3``, ``F3@1``), its kind, micro-batch and
model chunk, and the colour, legend entry and words the timeline gives it (docs/jupyterlab.md,
"Chart tabs").

Each kind has a hue family of its own, none of which an ordinary phase or a fault uses: forward
green (the compute colour), backward brown, input gradient pink and weight gradient amber (a
zero-bubble schedule's split backward). A device holding several model chunks (interleaved
1F1B) draws chunk 0 in the family's darkest shade and each later chunk lighter, so the chunks of
one kind read as one colour told apart by shade.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# The action's letter -> the kind's name, as the legend and the tooltips say it.
KINDS = {"F": "forward", "B": "backward", "I": "input gradient", "W": "weight gradient"}
# Per kind, the shades of model chunks 0, 1, 2 (chunk 3 takes chunk 0's again), darkest first.
KIND_SHADES = {
    "forward": ("#2ca02c", "#74c476", "#b5e3a8"),
    "backward": ("#8c564b", "#b98b7d", "#dcc1b8"),
    "input gradient": ("#c51b7d", "#e377c2", "#f7c4e3"),
    "weight gradient": ("#b07800", "#e6ab02", "#f6d97a"),
}
# Label text on a bar: white on the darkest shade, near-black on the lighter ones.
LABEL_INKS = ("#ffffff", "#222222", "#222222")
ACTION_COLUMNS = ("action", "kind", "microbatch", "chunk", "colour", "legend", "detail", "ink")
_ACTION = re.compile(r"([FBIW])(\d+)(?:@(\d+))?")


class PipelineAction(NamedTuple):
    """One schedule action: ``kind`` (a value of ``KINDS``) of ``microbatch`` on the device's
    model chunk ``chunk`` (0 unless the device holds several)."""

    action: str
    kind: str
    microbatch: int
    chunk: int

    @property
    def colour(self) -> str:
        shades = KIND_SHADES[self.kind]
        return shades[self.chunk % len(shades)]

    @property
    def ink(self) -> str:
        return LABEL_INKS[self.chunk % len(LABEL_INKS)]

    @property
    def legend(self) -> str:
        """The legend entry: the kind, and the chunk past the first (``forward, chunk 1``)."""
        return f"{self.kind}, chunk {self.chunk}" if self.chunk else self.kind

    @property
    def detail(self) -> str:
        """The tooltip's words, e.g. ``backward of micro-batch 3 on model chunk 1``."""
        words = f"{self.kind} of micro-batch {self.microbatch}"
        return f"{words} on model chunk {self.chunk}" if self.chunk else words

    def columns(self) -> dict[str, str | int]:
        """The timeline row's ``ACTION_COLUMNS``."""
        return {name: getattr(self, name) for name in ACTION_COLUMNS}


def parse_action(action: str) -> PipelineAction | None:
    """The action ``action`` names, or None for "" (not a pipeline stage's compute) and for
    anything else that is no schedule action (a record written by other code): the timeline
    then draws the phase as it draws every other.

    Examples
    --------
    >>> parse_action("W3@1")
    PipelineAction(action='W3@1', kind='weight gradient', microbatch=3, chunk=1)
    >>> parse_action("F0").legend, parse_action("B2@1").detail
    ('forward', 'backward of micro-batch 2 on model chunk 1')
    >>> parse_action(""), parse_action("X3")
    (None, None)
    """
    match = _ACTION.fullmatch(action)
    if match is None:
        return None
    letter, microbatch, chunk = match.groups()
    return PipelineAction(action, KINDS[letter], int(microbatch), int(chunk or 0))
