"""Custom-loop tests start real local clusters; each checks that nothing is left running."""

from tests.parallel.conftest import no_leftover_processes  # noqa: F401 (a fixture)
