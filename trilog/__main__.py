"""``python -m trilog``: the same as the ``trilog`` command."""

import sys

from trilog.cli import main

sys.exit(main())
