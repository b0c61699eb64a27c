"""``python -m mdsd``: the same as the ``mdsd`` command."""

import sys

from mdsd.cli import main

sys.exit(main())
