"""The :class:`Catalog`: accelerator specs plus the offer table, and the queries on them.

Where offers come from, in order: a refreshed cache under ``<gpulease home>/catalog/offers.csv``
(written by ``update_from_gpuhunt`` / ``import_skypilot``), else the bundled dated snapshot
``catalog/data/offers.csv``. Parsed catalogs are kept for the life of the process, keyed by file
identity (path, mtime, size), so repeated ``Catalog.load()`` calls are free; their arrays are made
read-only because they are shared.

Offers include CPU-only instances (part ``cpu``, accelerator ``CPU``, ``gpu_count`` 0). The GPU
queries (:meth:`Catalog.query`, :meth:`Catalog.mask`, :meth:`Catalog.gpu_summary`,
:meth:`Catalog.names`) leave them out unless the accelerator asked is ``CPU`` itself; the
optimizer reads the whole table.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpulease.catalog import _tables
from gpulease.catalog._offers_csv import read_offers
from gpulease.catalog._specs import CPU_PART, bundled_specs
from gpulease.catalog._tables import RegionInfo
from gpulease.catalog.types import AcceleratorSpec, Offer, OfferTable
from gpulease.errors import CatalogError

BUNDLED_OFFERS = _tables.DATA_DIR / "offers.csv"
_LOADED: dict[tuple[str, int, int], Catalog] = {}


@dataclass(frozen=True, slots=True)
class GpuSummary:
    """One line of ``gpulease gpus``: an accelerator across all its offers (prices per GPU-hour)."""

    accelerator: str
    parts: tuple[str, ...]
    memory_gb: float
    providers: tuple[str, ...]
    offers: int
    on_demand_per_gpu_hour: float | None
    on_demand_offer: Offer | None
    spot_per_gpu_hour: float | None
    spot_offer: Offer | None
    bf16_tflops: float  # dense peak per GPU of the cheapest on-demand offer's part
    usd_per_bf16_tflop_hour: float | None  # cheapest on-demand $/GPU-h ÷ dense BF16 TFLOPS


def _freeze(table: OfferTable) -> OfferTable:
    for values in table.column_dict().values():
        values.flags.writeable = False
    return table


def _named_by_part(offers: OfferTable, specs: Mapping[str, AcceleratorSpec]) -> OfferTable:
    """``offers`` with each row's accelerator name taken from its part's spec, so that a file
    written under older names (``H100`` for an NVL part) reads as today's (``H100-NVL``)."""
    uniques, inverse = offers.codes("part")
    names = np.array([specs[str(part)].name for part in uniques], dtype=np.str_)
    wanted = names[inverse] if len(offers) else offers.accelerator
    if np.array_equal(wanted, offers.accelerator):
        return offers
    table = OfferTable.from_columns({**offers.column_dict(), "accelerator": wanted}, offers.extra)
    return _freeze(table) if not offers.accelerator.flags.writeable else table


def _cheapest(per_gpu: npt.NDArray[np.float64]) -> int | None:
    if per_gpu.size == 0 or bool(np.all(np.isnan(per_gpu))):
        return None
    return int(np.nanargmin(per_gpu))


class Catalog:
    """Accelerator specs by part and the offers (columnar), with where they came from.

    ``source`` is ``"bundled"`` for the shipped snapshot, the cache file's path for a refreshed
    catalog, or ``"synthetic(...)"``.
    """

    def __init__(
        self, offers: OfferTable, accelerators: dict[str, AcceleratorSpec], *, source: str
    ) -> None:
        unknown = sorted(set(offers.part.tolist()) - set(accelerators))
        if unknown:
            raise CatalogError(
                f"{source}: offers name unknown accelerator parts: {', '.join(unknown)}"
            )
        self.offers = _named_by_part(offers, accelerators)
        self.accelerators = accelerators
        self.source = source
        self.as_of = self._newest_as_of()

    def __repr__(self) -> str:
        return f"Catalog({len(self.offers)} offers, as of {self.as_of}, source={self.source!r})"

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def load(cls, *, bundled_only: bool = False) -> Catalog:
        """The refreshed cache when there is one (unless ``bundled_only``), else the snapshot."""
        if not bundled_only:
            from gpulease.catalog._paths import cache_path

            cache = cache_path()
            if cache.exists():
                return cls._load_file(cache, source=str(cache))
        return cls._load_file(BUNDLED_OFFERS, source="bundled")

    @classmethod
    def from_csv(cls, path: str | Path) -> Catalog:
        """A catalog of the offers in ``path`` (our ``offers.csv`` schema)."""
        path = Path(path)
        return cls._load_file(path, source=str(path))

    @classmethod
    def _load_file(cls, path: Path, *, source: str) -> Catalog:
        try:
            stat = path.stat()
        except OSError as exc:
            raise CatalogError(f"cannot read the offers file {path}: {exc.strerror}") from None
        key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
        catalog = _LOADED.get(key)
        if catalog is None or catalog.source != source:
            catalog = cls(_freeze(read_offers(path)), dict(bundled_specs()), source=source)
            _LOADED[key] = catalog
        return catalog

    @classmethod
    def synthetic(cls, n_offers: int, seed: int = 0) -> Catalog:
        """A deterministic catalog of ``n_offers`` offers sampled from the bundled snapshot."""
        from gpulease.catalog._synthetic import synthetic_table

        base = cls.load(bundled_only=True)
        table = synthetic_table(base.offers, n_offers, seed)
        return cls(table, dict(base.accelerators), source=f"synthetic(n={n_offers}, seed={seed})")

    def with_offers(
        self,
        extra: OfferTable,
        *,
        label: str,
        specs: Mapping[str, AcceleratorSpec] | None = None,
    ) -> Catalog:
        """This catalog plus ``extra`` offers (e.g. the local provider's nodes, built at run time
        by the provider) and the ``specs`` of any parts they add; ``label`` names them in
        :attr:`source`."""
        if len(extra) == 0 and not specs:
            return self
        merged = OfferTable.concat([self.offers, extra])
        accelerators = {**self.accelerators, **(specs or {})}
        return Catalog(merged, accelerators, source=f"{self.source}+{label}")

    # -- specs ----------------------------------------------------------------------------------

    def spec_for(self, part: str) -> AcceleratorSpec:
        """The spec of ``part`` (e.g. ``H100-SXM``); raises :class:`CatalogError` if unknown."""
        try:
            return self.accelerators[part]
        except KeyError:
            known = ", ".join(sorted(self.accelerators))
            raise CatalogError(f"unknown accelerator part {part!r}; known parts: {known}") from None

    def parts_of(self, name: str) -> list[AcceleratorSpec]:
        """The parts sold under an accelerator name (``H100`` → SXM, PCIe, NVL), any case.
        A part name gives that part; an unknown name gives []."""
        wanted = name.strip().lower()
        by_name = [s for s in self.accelerators.values() if s.name.lower() == wanted]
        if by_name:
            return sorted(by_name, key=lambda s: s.part)
        return [s for s in self.accelerators.values() if s.part.lower() == wanted]

    def names(self) -> list[str]:
        """The canonical accelerator names with a spec, sorted (GPUs only: not ``CPU``)."""
        return sorted({s.name for s in self.accelerators.values() if s.part != CPU_PART})

    # -- where and when -------------------------------------------------------------------------

    def _newest_as_of(self) -> date:
        dates = set(self.offers.as_of.tolist()) - {""}  # (np.unique would load numpy.ma)
        if not dates:
            return date.min
        try:
            return max(date.fromisoformat(d) for d in dates)
        except ValueError as exc:
            raise CatalogError(f"{self.source}: bad as_of date: {exc}") from None

    def age_days(self, today: date | None = None) -> int:
        """Days between the newest as-of date of the offers and ``today`` (default: today)."""
        return ((today or date.today()) - self.as_of).days

    @property
    def providers(self) -> list[str]:
        return sorted(set(self.offers.provider.tolist()))

    def region_info(self, provider: str, region: str) -> RegionInfo:
        """Country, continent and EU/EEA flag of a region (country "" when unknown)."""
        return _tables.region_info(provider, region)

    def countries(self) -> npt.NDArray[np.str_]:
        """ISO alpha-2 country of every offer's region ("" when unknown), aligned with offers."""
        keys = np.char.add(np.char.add(self.offers.provider, "\t"), self.offers.region)
        unique, inverse = np.unique(keys, return_inverse=True)
        found = [_tables.region_info(*str(k).split("\t", 1)).country for k in unique]
        return np.array(found, dtype=np.str_)[inverse]

    # -- queries --------------------------------------------------------------------------------

    def mask(
        self,
        accelerator: str | None = None,
        providers: Iterable[str] | None = None,
        regions: Iterable[str] | None = None,
        spot: bool = False,
        min_gpus: int | None = None,
        *,
        cpu_arch: str | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Which offers match (see :meth:`query`); CPU-only offers only when ``accelerator``
        names them (``CPU``)."""
        o = self.offers
        keep = np.ones(len(o), dtype=bool)
        if accelerator:
            keep &= self._accelerator_mask(accelerator)
        else:
            keep &= o.gpu_count > 0
        if providers is not None:
            keep &= np.isin(o.provider, [p.lower() for p in providers])
        if regions is not None:
            patterns = list(regions)
            names = sorted(set(o.region[keep].tolist()))
            allowed = [r for r in names if any(fnmatch.fnmatchcase(r, p) for p in patterns)]
            keep &= np.isin(o.region, allowed)
        if spot:
            keep &= ~np.isnan(o.price_spot)
        if min_gpus is not None:
            keep &= o.gpu_count >= min_gpus
        if cpu_arch is not None and cpu_arch != "any":
            keep &= o.cpu_arch == cpu_arch
        return keep

    def _accelerator_mask(self, accelerator: str) -> npt.NDArray[np.bool_]:
        """Offers of a name or part (any case); else of the name's canonical spelling
        (``a100_80gb`` → ``A100-80GB``, ``H100-SXM5`` → ``H100``) per :mod:`gpulease.spec`."""
        o = self.offers
        wanted = accelerator.strip().lower()
        hit: npt.NDArray[np.bool_] = (np.char.lower(o.accelerator) == wanted) | (
            np.char.lower(o.part) == wanted
        )
        if hit.any() or wanted in {p.lower() for p in self.accelerators}:
            return hit
        from gpulease.spec import canonical_accelerator_name  # lazy: pulls in pydantic

        try:
            return np.asarray(o.accelerator == canonical_accelerator_name(accelerator))
        except ValueError:
            return hit

    def query(
        self,
        accelerator: str | None = None,
        providers: Iterable[str] | None = None,
        regions: Iterable[str] | None = None,
        spot: bool = False,
        min_gpus: int | None = None,
        *,
        cpu_arch: str | None = None,
    ) -> list[Offer]:
        """Offers matching every given filter, cheapest per GPU-hour first (unpriced last);
        GPU offers only, unless ``accelerator`` is ``CPU`` (then cheapest per instance-hour).

        ``accelerator`` is a name (``A100-80GB``) or a part (``H100-SXM``), any case;
        ``regions`` are exact names or fnmatch patterns (``eu-*``); ``spot`` keeps offers with a
        spot price and sorts by it; ``min_gpus`` is the least GPUs per node; ``cpu_arch``
        (``x86_64``, ``arm64``; None or ``any``: all) the host CPU architecture.
        """
        keep = self.mask(accelerator, providers, regions, spot, min_gpus, cpu_arch=cpu_arch)
        index = np.flatnonzero(keep)
        prices = self.offers.price_spot if spot else self.offers.price_on_demand
        per_gpu = prices[index] / np.maximum(self.offers.gpu_count[index], 1)
        order = np.lexsort((self.offers.instance_type[index], np.nan_to_num(per_gpu, nan=np.inf)))
        return [self.offers.row(int(i)) for i in index[order]]

    def gpu_summary(
        self,
        providers: Iterable[str] | None = None,
        regions: Iterable[str] | None = None,
        cpu_arch: str | None = None,
    ) -> list[GpuSummary]:
        """Per accelerator name: cheapest on-demand and spot price per GPU-hour, providers,
        memory, and dollars per dense BF16 TFLOP-hour; sorted by name. ``cpu_arch`` as in
        :meth:`query`."""
        base = self.mask(providers=providers, regions=regions, cpu_arch=cpu_arch)
        o = self.offers
        out = []
        for name in sorted(set(o.accelerator[base].tolist())):
            index = np.flatnonzero(base & (o.accelerator == name))
            od = o.price_on_demand[index] / o.gpu_count[index]
            sp = o.price_spot[index] / o.gpu_count[index]
            best_od, best_spot = _cheapest(od), _cheapest(sp)
            od_offer = o.row(int(index[best_od])) if best_od is not None else None
            bf16 = self.spec_for(od_offer.part).peak_tflops("bf16") if od_offer else math.nan
            out.append(
                GpuSummary(
                    accelerator=name,
                    parts=tuple(sorted(set(o.part[index].tolist()))),
                    memory_gb=float(np.max(o.gpu_memory_gb[index])),
                    providers=tuple(sorted(set(o.provider[index].tolist()))),
                    offers=int(index.size),
                    on_demand_per_gpu_hour=float(od[best_od]) if best_od is not None else None,
                    on_demand_offer=od_offer,
                    spot_per_gpu_hour=float(sp[best_spot]) if best_spot is not None else None,
                    spot_offer=o.row(int(index[best_spot])) if best_spot is not None else None,
                    bf16_tflops=bf16,
                    usd_per_bf16_tflop_hour=(
                        float(od[best_od]) / bf16 if best_od is not None and bf16 > 0 else None
                    ),
                )
            )
        return out
