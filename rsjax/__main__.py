"""``python -m rsjax``: the ``rsjax`` command (as ``python -m rsjax.cli``)."""

import sys

from rsjax.cli import main

sys.exit(main())
