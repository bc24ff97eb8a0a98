"""Cost: reading the ledger and the history for reports (``cost``, ``audit``, ``sla``, ``tco``)."""
