"""``--compression`` values: ``none | fp16 | bf16 | topk:RATIO | powersgd:RANK``.

A value is text on the command line and in a run's config (so configs stay JSON and compare
by value); :func:`parse_compression` turns it into a :class:`CompressionSpec` the codecs read.
``float16`` is still accepted: it was the flag's only compressed value before the family grew,
and it means fp16.
"""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("none", "fp16", "bf16", "topk", "powersgd")
HALF_PRECISION_METHODS = ("fp16", "bf16")
ALIASES = {"float16": "fp16"}
# How the forms read in help and in every refusal.
COMPRESSION_FORMS = (
    "none | fp16 | bf16 | topk:RATIO (0 < RATIO <= 1, e.g. topk:0.01) | "
    "powersgd:RANK (an integer >= 1, e.g. powersgd:2)"
)


class CompressionError(ValueError):
    """A malformed or out-of-range ``--compression`` value (the message names the forms)."""


@dataclass(frozen=True)
class CompressionSpec:
    """One compression setting: the method and its argument (``ratio`` for top-k, ``rank``
    for PowerSGD).

    Examples
    --------
    >>> parse_compression("topk:0.01")
    CompressionSpec(method='topk', ratio=0.01, rank=None)
    >>> parse_compression("powersgd:2").text
    'powersgd:2'
    >>> parse_compression("float16").text
    'fp16'
    """

    method: str = "none"
    ratio: float | None = None
    rank: int | None = None

    @property
    def text(self) -> str:
        """The canonical ``--compression`` value."""
        if self.method == "topk":
            return f"topk:{self.ratio!r}"
        if self.method == "powersgd":
            return f"powersgd:{self.rank}"
        return self.method

    @property
    def half_precision(self) -> bool:
        """Gradients travel in 16 bits (and are loss-scaled to fit them)."""
        return self.method in HALF_PRECISION_METHODS

    @property
    def compresses(self) -> bool:
        return self.method != "none"


def parse_compression(value: str | CompressionSpec) -> CompressionSpec:
    """The :class:`CompressionSpec` of a ``--compression`` value; :class:`CompressionError`
    (a ``ValueError``) naming the allowed forms if it is malformed or out of range.

    Examples
    --------
    >>> parse_compression("bf16").half_precision
    True
    >>> try:
    ...     parse_compression("topk:2")
    ... except CompressionError as error:
    ...     print(str(error).split(";")[0])
    topk:2: RATIO must be a number in (0, 1], got 2
    """
    if isinstance(value, CompressionSpec):
        return value
    if not isinstance(value, str):
        raise CompressionError(f"expected one of {COMPRESSION_FORMS}, got {value!r}")
    text = ALIASES.get(value.strip(), value.strip())
    method, colon, argument = text.partition(":")
    if method in ("none", *HALF_PRECISION_METHODS) and not colon:
        return CompressionSpec(method)
    if method == "topk" and colon:
        try:
            ratio = float(argument)
        except ValueError:
            ratio = float("nan")
        if not 0 < ratio <= 1:  # NaN fails too
            raise _refusal(text, f"RATIO must be a number in (0, 1], got {argument or 'nothing'}")
        return CompressionSpec("topk", ratio=ratio)
    if method == "powersgd" and colon:
        try:
            rank = int(argument)
        except ValueError:
            rank = 0
        if rank < 1:
            raise _refusal(text, f"RANK must be an integer >= 1, got {argument or 'nothing'}")
        return CompressionSpec("powersgd", rank=rank)
    if method in ("topk", "powersgd"):
        raise _refusal(text, f"{method} needs its argument, like {method}:{_EXAMPLE[method]}")
    raise CompressionError(f"unknown compression {value!r}; choose one of: {COMPRESSION_FORMS}")


_EXAMPLE = {"topk": "0.01", "powersgd": "2"}


def _refusal(text: str, detail: str) -> CompressionError:
    return CompressionError(f"{text}: {detail}; forms: {COMPRESSION_FORMS}")


def canonical_compression(text: str) -> str:
    """``text`` in its canonical form (the ``--compression`` flag's converter)."""
    return parse_compression(text).text
