"""``python -m gpulease.server run``: see :mod:`gpulease.server.main`."""

import sys

from gpulease.server.main import main

sys.exit(main())
