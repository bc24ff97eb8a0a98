"""What the install spent: reports over the cost ledger (``ledger_entries``, written only by
``state/ledger.py``). The server and the CLI may import this package; the controller may not.
Each module owns one report or a piece of one: ``period`` (the ``--since`` / ``--month`` / ``--by``
options), ``overlap`` (a period's SQL), ``report`` (``gpulease cost``), ``estimates``
(estimated against actual), ``sla`` (``gpulease sla``), ``audit/`` (``gpulease audit``),
``budgets`` / ``spend`` / ``enforce`` (the ``budgets:`` config, a scope's spend, the budget
rules), ``tco`` / ``tco_input`` (``gpulease tco``); none moves a state or writes a ledger row.
"""
