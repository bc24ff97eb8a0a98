"""Expected cost of spot interruptions for a plan.

The interruption band of an offer (AWS Spot Advisor's "frequency of interruption": the share of
instances reclaimed during the trailing month — <5 %, 5–10 %, 10–15 %, 15–20 %, >20 %) becomes an
hourly interruption rate per node ``λ = −ln(1 − p) / 730``. Each interruption loses, on average,
half a checkpoint interval of work plus a restart (re-provisioning, setup, checkpoint restore).
With ``n`` nodes the job is hit at rate ``n·λ``, so the expected wall time ``H_s`` satisfies
``H_s = H + n·λ·H_s·L``, i.e. ``H_s = H / (1 − n·λ·L)``; when ``n·λ·L ≥ 1`` the job would not
finish on spot and the plan is dropped.

Offers with no band on record (providers that publish none) use :data:`UNKNOWN_BAND` — a cautious
15–20 %.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

HOURS_PER_MONTH = 730.0
#: (low, expected, high) monthly interruption probability per band 0..4.
BAND_MONTHLY = np.array(
    [
        [0.00, 0.025, 0.05],
        [0.05, 0.075, 0.10],
        [0.10, 0.125, 0.15],
        [0.15, 0.175, 0.20],
        [0.20, 0.30, 0.50],
    ]
)
BAND_LABELS = ("<5%", "5-10%", "10-15%", "15-20%", ">20%")
UNKNOWN_BAND = 3
DEFAULT_CHECKPOINT_INTERVAL_H = 0.5
DEFAULT_RESTART_H = 0.25  # re-provision + setup + restore; the recovery target is well below this


def hourly_rates(band: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Per-node hourly interruption rates, shape (len(band), 3): low, expected, high."""
    known = np.where((band >= 0) & (band < len(BAND_MONTHLY)), band, UNKNOWN_BAND)
    monthly: npt.NDArray[np.float64] = BAND_MONTHLY[known]
    rates: npt.NDArray[np.float64] = -np.log1p(-monthly) / HOURS_PER_MONTH
    return rates


def loss_per_interruption(checkpoint_interval_h: float | None) -> float:
    """Hours lost per interruption: half a checkpoint interval plus a restart."""
    interval = checkpoint_interval_h or DEFAULT_CHECKPOINT_INTERVAL_H
    return interval / 2.0 + DEFAULT_RESTART_H


def stretch_factor(
    rate: npt.NDArray[np.float64], nodes: npt.NDArray[np.float64], loss_h: float
) -> npt.NDArray[np.float64]:
    """``1 / (1 − n·λ·L)``; NaN where the job would not finish on spot."""
    load = rate * nodes * loss_h
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(load < 0.9, 1.0 / (1.0 - load), np.nan)


def band_label(band: int | None) -> str:
    if band is None or band < 0 or band >= len(BAND_LABELS):
        return "unknown (assumed 15-20%)"
    return BAND_LABELS[band]
