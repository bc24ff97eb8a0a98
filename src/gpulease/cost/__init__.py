"""What the install spent: reports over the cost ledger (``ledger_entries``, written only by
``state/ledger.py``). The server and the CLI may import this package; the controller may not.
Each module owns one report (``report``: ``gpulease cost``; ``period``: the ``--since`` /
``--month`` windows); none moves a state or writes a ledger row.
"""
