"""``python -m rsjax.cli``: the ``rsjax`` command."""

import sys

from rsjax.cli import main

sys.exit(main())
