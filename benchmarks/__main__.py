"""``python -m benchmarks [--list] [--json] [SUITE [flags]]`` (:mod:`benchmarks.command`)."""

import sys

from benchmarks.command import main

sys.exit(main())
