"""Alembic migrations of the state DB (``env.py`` + ``versions/``), run by
:func:`gpulease.state.migrate.upgrade`; no alembic.ini is needed."""
