"""What every benchmark shares: samples, goals, the table, the JSON, the machine.

A benchmark appends :class:`Measure` objects (one per variant and configuration, holding
every repetition's sample) to a :class:`Results`, and :mod:`benchmarks.goals` turns them into
goal verdicts. Nothing here ever fails on a number: a failed repetition is recorded with its
error, and a goal without the numbers it needs is reported as "not measured", with why.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

# hybrid's packaged defaults must be in dask.config before any benchmark sets a hybrid.* key:
# dask.config.set drops, on exit, a section that did not exist when it was entered
import hybrid  # noqa: F401


@dataclass
class Measure:
    """Every repetition of one variant of one benchmark configuration."""

    benchmark: str
    system: str
    config: str
    variant: str
    unit: str
    samples: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: Further numbers of each repetition (e.g. the close time beside a scale-up time).
    extra: dict[str, list[float]] = field(default_factory=dict)
    note: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        """(benchmark, system, config, variant)."""
        return (self.benchmark, self.system, self.config, self.variant)

    def median(self) -> float | None:
        """The median of the good samples (``None`` when there is none)."""
        good = [s for s in self.samples if math.isfinite(s)]
        return statistics.median(good) if good else None

    def span(self) -> tuple[float, float] | None:
        """(min, max) of the good samples."""
        good = [s for s in self.samples if math.isfinite(s)]
        return (min(good), max(good)) if good else None

    def summary(self) -> str:
        """``median [min-max]`` with the unit's precision."""
        median, span = self.median(), self.span()
        if median is None or span is None:
            return "failed" if self.errors else "-"
        return f"{fmt(median)} [{fmt(span[0])}-{fmt(span[1])}]"


@dataclass
class Goal:
    """One goal of the issue and whether the measured numbers meet it."""

    goal: str
    text: str
    value: str
    met: bool | None
    why: str = ""


@dataclass
class Skip:
    """A benchmark that could not run here, and why."""

    benchmark: str
    why: str


@dataclass
class Results:
    """Everything one run of ``python -m benchmarks`` measured."""

    measures: list[Measure] = field(default_factory=list)
    goals: list[Goal] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    def measure(self, benchmark: str, system: str, config: str, variant: str,
                unit: str = "s", note: str = "") -> Measure:
        """The measure for this key, made on first use."""
        for measure in self.measures:
            if measure.key == (benchmark, system, config, variant):
                return measure
        measure = Measure(benchmark, system, config, variant, unit, note=note)
        self.measures.append(measure)
        return measure

    def find(self, benchmark: str, system: str, config: str, variant: str) -> Measure | None:
        """The measure for this key, if any."""
        return next((m for m in self.measures
                     if m.key == (benchmark, system, config, variant)), None)

    def skip(self, benchmark: str, why: str) -> None:
        """Record that ``benchmark`` could not run, and why."""
        self.skips.append(Skip(benchmark, why))
        log(f"{benchmark}: skipped: {why}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, medians and ranges included."""
        measures = []
        for m in self.measures:
            item = asdict(m)
            item["median"] = m.median()
            item["range"] = m.span()
            measures.append(item)
        return {"machine": self.machine, "settings": self.settings, "measures": measures,
                "goals": [asdict(g) for g in self.goals],
                "skips": [asdict(s) for s in self.skips]}

    def write_json(self, path: str) -> None:
        """Write :meth:`as_dict` to ``path``."""
        with open(path, "w") as out:
            json.dump(self.as_dict(), out, indent=2, default=_json_default)
            out.write("\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def fmt(value: float | None) -> str:
    """A number with about three significant digits."""
    if value is None or not math.isfinite(value):
        return "-"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 0.1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def ratio(numerator: Measure | None, denominator: Measure | None) -> float | None:
    """median(numerator) / median(denominator), or ``None``."""
    if numerator is None or denominator is None:
        return None
    a, b = numerator.median(), denominator.median()
    if a is None or b is None or b == 0:
        return None
    return a / b


def log(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def repeat(measure: Measure, function: Callable[[], float | dict[str, float]]) -> None:
    """Run ``function`` once and record its number(s); an exception is recorded, not raised.

    ``function`` returns the sample, or a dict whose ``"value"`` is the sample and whose other
    keys go to :attr:`Measure.extra`.
    """
    try:
        result = function()
    except Exception as error:  # a broken repetition is a result too
        measure.samples.append(math.nan)
        measure.errors.append(f"{type(error).__name__}: {error}"[:500])
        log(f"{measure.benchmark} {measure.system} {measure.config} {measure.variant}: "
            f"FAILED: {type(error).__name__}: {error}")
        if os.environ.get("HYBRID_BENCH_TRACEBACK"):
            traceback.print_exc()
        return
    if isinstance(result, dict):
        measure.samples.append(float(result["value"]))
        for key, value in result.items():
            if key != "value":
                measure.extra.setdefault(key, []).append(float(value))
    else:
        measure.samples.append(float(result))
    log(f"{measure.benchmark} {measure.system} {measure.config} {measure.variant}: "
        f"{fmt(measure.samples[-1])} {measure.unit}")


def rotated(items: list[Any], turn: int) -> list[Any]:
    """``items`` rotated by ``turn``: interleaved repetitions do not always run in one order."""
    if not items:
        return items
    turn %= len(items)
    return items[turn:] + items[:turn]


def machine() -> dict[str, Any]:
    """What this machine is: CPUs, memory, OS, Python, the versions that matter."""
    from importlib.metadata import PackageNotFoundError, version

    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "host": platform.node(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    try:
        with open("/proc/meminfo") as meminfo:
            info["memory_gib"] = round(int(meminfo.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo
                          if line.startswith("model name")), None)
        if model:
            info["cpu_model"] = model
    except OSError:
        pass
    info["load_average"] = os.getloadavg()
    versions = {}
    for package in ("hybrid", "dask", "distributed", "dask-jobqueue", "htcondor", "openmm",
                    "packmol"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None
    info["versions"] = versions
    for name, argv in (("slurm", ["sinfo", "--version"]),):
        try:
            info[name] = subprocess.run(argv, capture_output=True, text=True,
                                        timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info[name] = None
    return info


def table(results: Results) -> str:
    """The measures as a Markdown table: median [range], and the ratio to the anchor."""
    from benchmarks.goals import ANCHORS

    lines = ["| benchmark | system | config | variant | median [min-max] | unit | ratio | runs |",
             "|---|---|---|---|---|---|---|---|"]
    for m in sorted(results.measures, key=_order):
        anchor_variant = ANCHORS.get(m.benchmark)
        anchor = (results.find(m.benchmark, m.system, m.config, anchor_variant)
                  if anchor_variant and anchor_variant != m.variant and ":" not in m.variant
                  else None)
        r = ratio(m, anchor)
        shown = f"{r:.2f}x {anchor_variant}" if r is not None else ""
        runs = f"{sum(1 for s in m.samples if math.isfinite(s))}/{len(m.samples)}"
        lines.append(f"| {m.benchmark} | {m.system} | {m.config} | {m.variant} | "
                     f"{m.summary()} | {m.unit} | {shown} | {runs} |")
    return "\n".join(lines)


#: Row order: benchmarks as they run, then the scale-up's by-products.
BENCHMARK_ORDER = ("scale-up", "post-match", "until the first match", "close",
                   "queue empty after close", "submit", "reschedule", "annotation",
                   "reconcile", "gpu-md", "busy: over-submission", "busy: walltime",
                   "busy: spill-over", "busy-sim")


def _order(m: Measure) -> tuple[int, str, float, int]:
    """Benchmark, system, configuration (``n=16`` by its number), variant (the scale-up's
    in their table order, others as they came)."""
    from benchmarks.scaleup import NAMES

    rank = BENCHMARK_ORDER.index(m.benchmark) if m.benchmark in BENCHMARK_ORDER else 99
    number = m.config.split("=", 1)[1] if m.config.startswith("n=") else ""
    variant = NAMES.index(m.variant) if m.variant in NAMES else 0
    return (rank, m.system, float(number) if number.isdigit() else 0.0, variant)


def goal_table(goals: Iterable[Goal]) -> str:
    """The goals as a Markdown table."""
    lines = ["| goal | target | measured | met |", "|---|---|---|---|"]
    for g in goals:
        met = {True: "yes", False: "NO", None: "not measured"}[g.met]
        value = g.value + (f" ({g.why})" if g.why else "")
        lines.append(f"| {g.goal} | {g.text} | {value} | {met} |")
    return "\n".join(lines)
