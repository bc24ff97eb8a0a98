"""``python -m gpulease.estimate``: print the calibration table of docs/estimate.md, then the
table of the published runs held out of calibration."""

from __future__ import annotations

from gpulease.estimate.calibration import calibration_report, heldout_report, markdown_table

print(markdown_table(calibration_report()))
print()
print(markdown_table(heldout_report(), held_out=True))
