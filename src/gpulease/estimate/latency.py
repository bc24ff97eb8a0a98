"""Serving latency under load: time to first token, time per output token and the p95 request
latency of one replica at a request rate, and the fewest replicas that meet a latency target.

Pure functions over a :class:`ReplicaModel` (what :mod:`~gpulease.estimate.inference` derives
from the model and the part); no states. The load model is a *batch* model of continuous
batching, chosen over an M/M/1 inflation of the whole request because a replica serves its
requests side by side, not one after another:

- a request holds one batch slot from arrival to its last token, so the requests in flight are
  those of an M/G/∞ system: Poisson with mean L = λ · S (Little's law), whatever the request
  length; L is the fixed point of S, which grows with the batch (:func:`load_at`);
- an arriving request runs beside the others in flight (Poisson arrivals see time averages), so
  at the 95th percentile it decodes in a batch of 1 + the Poisson 95th percentile of L, each step
  reading the weights once and every sequence's KV cache;
- prefill is the one serial resource: the prompts of new requests take λ · prefill of the
  replica's time, which stretches every decode step by 1 / (1 − ρ), and a prompt waits for the
  prompts ahead of it — there, and only there, an M/M/1 wait (p95 wait = ln(ρ / 0.05) · prefill /
  (1 − ρ)), an upper bound for prompts of equal length — and for the decode step of the others
  in flight to finish;
- a batch larger than the KV cache holds would queue requests for memory without bound in this
  model: such a rate is not served (:func:`latency_at` returns None).

p95 latency = TTFT p95 + (output tokens − 1) × TPOT p95 (the first token comes with the prefill;
the sum of two 95th percentiles bounds the 95th percentile of the sum from above).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The replica count searched up to for a latency target (beyond it: say the target is missed).
MAX_REPLICAS = 100_000
P95_TAIL = 0.05


@dataclass(frozen=True, slots=True)
class ReplicaModel:
    """One replica's timings: ``prefill_s`` per prompt; a decode step of ``n`` sequences takes
    max(``step_base_s`` + n · ``step_per_seq_s``, n · ``step_compute_per_seq_s``) (the weights
    and n KV caches read from memory, or 2·N·n FLOPs of compute); at most ``max_batch``
    sequences fit the KV cache; each request generates ``output_tokens``."""

    prefill_s: float
    step_base_s: float
    step_per_seq_s: float
    step_compute_per_seq_s: float
    max_batch: int
    output_tokens: int

    def step_s(self, batch: float) -> float:
        """Seconds of one decode step with ``batch`` sequences."""
        memory = self.step_base_s + batch * self.step_per_seq_s
        return max(memory, batch * self.step_compute_per_seq_s)


@dataclass(frozen=True, slots=True)
class Latency:
    """The latency figures of a replica at ``rate`` requests/s (all in seconds)."""

    rate: float
    in_flight: float  # mean requests in flight (L)
    batch_p95: int  # the batch a request decodes in, at the 95th percentile
    prefill_share: float  # ρ: the share of the replica's time spent on prompts
    ttft_p95_s: float
    tpot_p95_s: float
    latency_p95_s: float

    output_tokens: int = 1

    def describe(self) -> str:
        """``p95 2.41 s = TTFT 210 ms + 255 × 8.6 ms at batch 12``."""
        return (
            f"p95 {_seconds(self.latency_p95_s)} = TTFT {_seconds(self.ttft_p95_s)} + "
            f"{self.output_tokens - 1} × {_seconds(self.tpot_p95_s)} at batch {self.batch_p95}"
        )


@dataclass(frozen=True, slots=True)
class Targets:
    """The p95 targets a replica must meet, in seconds (None: no target)."""

    latency_p95_s: float | None = None
    ttft_p95_s: float | None = None
    tpot_p95_s: float | None = None

    def any(self) -> bool:
        return any(v is not None for v in (self.latency_p95_s, self.ttft_p95_s, self.tpot_p95_s))

    def misses(self, figures: Latency) -> list[str]:
        """The targets ``figures`` miss, each as ``what figure > target``."""
        missed = []
        for name, value, target in (
            ("p95 latency", figures.latency_p95_s, self.latency_p95_s),
            ("TTFT p95", figures.ttft_p95_s, self.ttft_p95_s),
            ("TPOT p95", figures.tpot_p95_s, self.tpot_p95_s),
        ):
            if target is not None and value > target:
                missed.append(f"{name} {_seconds(value)} > {_seconds(target)} target")
        return missed


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 1 else f"{value * 1000:,.1f} ms"


def poisson_quantile(mean: float, tail: float = P95_TAIL) -> int:
    """The smallest k with P(X ≤ k) ≥ 1 − ``tail`` for X ~ Poisson(``mean``)."""
    if mean <= 0:
        return 0
    if mean > 500:  # normal approximation; the exact sum underflows e^-mean
        return math.ceil(mean + 1.6449 * math.sqrt(mean))
    term = math.exp(-mean)
    total, k = term, 0
    while total < 1 - tail:
        k += 1
        term *= mean / k
        total += term
    return k


def load_at(model: ReplicaModel, rate: float) -> tuple[float, float] | None:
    """(mean requests in flight L, prefill share ρ) at ``rate`` requests/s, or None when the
    replica cannot keep up (prompts fill its time, or decode cannot drain the batch)."""
    rho = rate * model.prefill_s
    if rho >= 1:
        return None
    decode = rate * (model.output_tokens - 1) / (1 - rho)  # steps a second of arrivals needs
    # L = λ·prefill + decode · step(L): the fixed point of each branch of step's max
    best = 0.0
    for base, slope in (
        (model.step_base_s, model.step_per_seq_s),
        (0.0, model.step_compute_per_seq_s),
    ):
        gain = 1 - decode * slope
        if gain <= 0:
            return None
        best = max(best, (rate * model.prefill_s + decode * base) / gain)
    return best, rho


def latency_at(model: ReplicaModel, rate: float) -> Latency | None:
    """The p95 figures of one replica at ``rate`` requests/s; None when the rate is not served
    (the replica cannot keep up, or the p95 batch exceeds what the KV cache holds)."""
    load = load_at(model, rate)
    if load is None:
        return None
    in_flight, rho = load
    batch = 1 + poisson_quantile(in_flight)
    if batch > model.max_batch:
        return None
    step = model.step_s(batch) / (1 - rho)
    wait = 0.0
    if rho > P95_TAIL:  # M/M/1 waiting time: P(W > w) = ρ · e^(−(1 − ρ) w / prefill)
        wait = math.log(rho / P95_TAIL) * model.prefill_s / (1 - rho)
    in_progress = model.step_s(batch - 1) if batch > 1 else 0.0  # others' step finishes first
    ttft = model.prefill_s + wait + in_progress
    latency = ttft + (model.output_tokens - 1) * step
    return Latency(rate, in_flight, batch, rho, ttft, step, latency, model.output_tokens)


def replicas_for(
    model: ReplicaModel, requests_per_second: float, targets: Targets, *, at_least: int = 1
) -> tuple[int, Latency] | str:
    """The fewest replicas (≥ ``at_least``) whose share of ``requests_per_second`` each
    serves within ``targets``, with the figures there; or why none does (the figures of an
    idle replica, which no number of replicas improves on, or the replica count searched).
    ``at_least`` must not exceed :data:`MAX_REPLICAS`."""

    def ok(replicas: int) -> Latency | None:
        figures = latency_at(model, requests_per_second / replicas)
        if figures is None or targets.misses(figures):
            return None
        return figures

    idle = latency_at(model, 0.0)  # the best a replica does: alone
    if idle is None:
        return "the replica cannot serve one request at a time"
    if missed := targets.misses(idle):
        return f"{'; '.join(missed)}, even lightly loaded ({idle.describe()})"
    if ok(MAX_REPLICAS) is None:
        return f"needs more than {MAX_REPLICAS:,} replicas for {requests_per_second:g} requests/s"
    low, high = at_least, at_least
    while ok(high) is None:  # double, then bisect: latency falls as replicas grow
        low, high = high, min(high * 2, MAX_REPLICAS)
    while low < high:
        mid = (low + high) // 2
        if ok(mid) is None:
            low = mid + 1
        else:
            high = mid
    figures = ok(high)
    assert figures is not None
    return high, figures
