"""Cost: reading the ledger (``state.ledger_entries``) — reports, budgets' spend, audits.

The controller writes ledger rows through ``state``; this package only reads them. Submodules are
imported where they are used (nothing is imported here).
"""
