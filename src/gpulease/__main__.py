"""``python -m gpulease``: the same as the ``gpulease`` console script."""

from gpulease.cli.main import run

run()
