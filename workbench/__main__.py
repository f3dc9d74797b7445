"""``python -m workbench``: the ``dtrain`` command where its script is not on ``PATH`` (a
wheelhouse installed with ``pip --target``, docs/gpus.md). ``python -m workbench.cli.main``
works too, but Python warns there, once per worker process, that the module was imported
before it ran."""

import sys

from workbench.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
