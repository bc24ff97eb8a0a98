"""What the install spent and what it could have saved: reports, budgets' spend, the audit,
rent-vs-buy and SLA credits, all read from the state DB's ledger (never written here)."""
