"""Alembic revisions of the state DB, oldest first (``0001_…``)."""
