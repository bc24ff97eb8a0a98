"""``python -m gpulease.estimate``: print the calibration table of docs/estimate.md."""

from __future__ import annotations

from gpulease.estimate.calibration import calibration_report, markdown_table

print(markdown_table(calibration_report()))
