"""The ``gpulease`` command line (Typer): parse, call the SDK or the in-process planner, render
with Rich. Imports stay lazy so that ``gpulease plan`` starts fast."""
