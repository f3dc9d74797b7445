"""Dashboard tests start real clusters; the parallel tests' fixture checks nothing is left."""

from tests.parallel.conftest import no_leftover_processes

__all__ = ["no_leftover_processes"]
