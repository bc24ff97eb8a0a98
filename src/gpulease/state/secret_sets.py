"""The state DB's encrypted secret sets: :class:`SecretSet`, one row per task's ``secrets:``
(migration 0013). A row holds only what the server's vault (:mod:`gpulease.server.vault`) wrote:
the id of the keyring key it was sealed with, the AES-256-GCM nonce and the ciphertext of the
whole ``{name: value}`` JSON — never a name or a value in clear. This module does no crypto (the
state package imports no crypto library): it stores, finds, lists and deletes the rows the vault
hands it. Declared on the same :class:`~gpulease.state.models.Base` (``models`` re-exports it).
Moves no states.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import LargeBinary, String, delete, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from gpulease.state.models import Base


class SecretSet(Base):
    """One sealed set: ``id`` is ``ss-<32 hex>`` (random, also the ciphertext's AAD, so a blob
    cannot be moved to another row), ``key_id`` names the keyring key, ``nonce`` is 12 bytes;
    ``updated_at`` moves when a key rotation re-seals the row."""

    __tablename__ = "secret_sets"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(64), index=True)
    nonce: Mapped[bytes] = mapped_column(LargeBinary)
    ciphertext: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[float]
    updated_at: Mapped[float]


def add_secret_set(session: Session, row: SecretSet) -> None:
    """Insert a sealed set (flushed, so a duplicate id fails here)."""
    session.add(row)
    session.flush()


def get_secret_set(session: Session, set_id: str) -> SecretSet | None:
    return session.get(SecretSet, set_id)


def delete_secret_set(session: Session, set_id: str) -> bool:
    """Remove a set; False when there was none."""
    result = session.execute(delete(SecretSet).where(SecretSet.id == set_id))
    return bool(getattr(result, "rowcount", 0))


def all_secret_sets(session: Session, *, lock: bool = False) -> Sequence[SecretSet]:
    """Every set, oldest first; ``lock``: rows locked for update (PostgreSQL; SQLite's writer
    lock covers the whole file once the transaction writes)."""
    query = select(SecretSet).order_by(SecretSet.created_at, SecretSet.id)
    if lock:
        query = query.with_for_update()
    return session.scalars(query).all()
