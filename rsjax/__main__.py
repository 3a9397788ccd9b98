"""``python -m rsjax``: the ``rsjax`` command (as ``python -m rsjax.app.cli``)."""

import sys

from rsjax.app.cli import main

sys.exit(main())
