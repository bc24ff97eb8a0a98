"""``python -m gpulease.server run``: see :mod:`gpulease.server.main`. ``rotate-secrets-key``
goes straight to :mod:`gpulease.server.vault.command` (it needs none of the server's imports)."""

import sys

if sys.argv[1:2] == ["rotate-secrets-key"]:
    from gpulease.server.vault.command import main
else:
    from gpulease.server.main import main

sys.exit(main())
