"""``python -m rsjax.app.cli``: the ``rsjax`` command (``python -m rsjax`` runs it too)."""

import sys

from rsjax.app.cli import main

sys.exit(main())
