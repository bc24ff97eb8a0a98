"""What gpulease spends and would spend: reports over the ledger, budgets, audits, SLAs, and
rent-against-buy (``tco``). Submodules are imported by name; this package imports none."""
