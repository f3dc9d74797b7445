"""The ``dtrain`` command line and the flag parser it shares with ``%dtrain``."""

from workbench.cli.main import main
from workbench.launch.flags import FlagError, build_parser, parse_run_flags

__all__ = ["FlagError", "build_parser", "main", "parse_run_flags"]
