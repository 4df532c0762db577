"""Does a fresh run reproduce a reference's speedups? One verdict per SD level, by a named rule.

Acceptance is a function of the arithmetic (:mod:`speedbench.pipeline.verify`); a speedup is a
ratio of two timings, and timings move with the host. Two rules, tried in this order:

- ``interval``: on the same host (same CPU model, kernel family and cores, same dtype, engine
  and engine release), when both runs measured the level in rounds and carry the paired
  interval of its speedup (``speedup_low``/``speedup_high`` in throughput.json,
  :mod:`speedbench.metrics.paired`): reproduced when the two intervals overlap.
- ``model``: otherwise (another host, or a run without rounds), through the speedup model
  (:mod:`speedbench.oracle.recommend`). The fresh run's model, fitted on this run's step costs
  with the level's own timings left out, predicts the level's speedup from its acceptance; the
  figure is reproduced when that prediction is within the model's own leave-one-out error on
  the reference, the largest ``|predicted / measured - 1|`` of the reference's levels of the
  same drafter in the stage. A slower host moves a speedup legitimately, through its step costs;
  this rule asks whether the fresh speedup is what the fresh host's costs and the reproduced
  acceptance imply, as closely as the model explained the reference's.

A level with neither (no rounds on one side, no model check of the level, or a reference
without a model for its drafter) is ``untestable``: printed, counted, deciding nothing.
Speedup verdicts are reported beside the acceptance verdict and do not change it or the exit
code: acceptance is what a reference promises on every host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from speedbench.provenance import SweepProvenance

REPRODUCED, NOT_REPRODUCED, UNTESTABLE = "reproduced", "not_reproduced", "untestable"
INTERVAL, MODEL = "interval", "model"


@dataclass(frozen=True)
class SpeedupVerdict:
    """One SD level's speedup in both runs, its verdict and the rule that gave it."""

    stage: str
    level: str
    reference: float
    measured: float
    verdict: str
    rule: str
    detail: str

    def line(self) -> str:
        """One line for the terminal."""
        by = f" by {self.rule}" if self.rule else ""
        return (
            f"{self.verdict.upper():>14} {self.stage} {self.level} speedup: reference "
            f"{self.reference:.3f}, measured {self.measured:.3f}{by} ({self.detail})"
        )


def same_host(reference: SweepProvenance | None, fresh: SweepProvenance | None) -> tuple[bool, str]:
    """Whether two runs' timings come from the same kind of host, and how they differ if not."""
    if reference is None or fresh is None:
        return False, "a run records no provenance"
    ref_cpu, new_cpu = reference.host_cpu, fresh.host_cpu
    if ref_cpu is None or new_cpu is None:
        return False, "a run records no host CPU"
    diffs = [
        f"{name} {a} vs {b}"
        for name, a, b in (
            ("CPU", ref_cpu.model, new_cpu.model),
            ("kernels", ref_cpu.kernel_family, new_cpu.kernel_family),
            ("cores", ref_cpu.cores, new_cpu.cores),
            ("kernel caps", ref_cpu.kernel_caps, new_cpu.kernel_caps),
            ("dtype", reference.dtype, fresh.dtype),
            ("engine", reference.engine, fresh.engine),
        )
        if a != b
    ]
    if set(reference.engine_versions.values()) != set(fresh.engine_versions.values()):
        diffs.append("engine version")
    return not diffs, "; ".join(diffs)


def model_tolerances(speedup_model: dict[str, Any]) -> dict[str, float]:
    """Drafter -> the largest leave-one-out ``|error|`` of a stage's speedup_model.json.

    Per drafter over the whole stage, not per split: a throughput stage's buckets are one level
    each, and a tolerance of one level would be that level's own error.
    """
    out: dict[str, float] = {}
    for check in (speedup_model.get("levels") or {}).values():
        error = check.get("error")
        if error is None or not math.isfinite(error):
            continue
        out[check["drafter"]] = max(out.get(check["drafter"], 0.0), abs(error))
    return out


def _interval(entry: dict[str, Any]) -> tuple[float, float] | None:
    low, high = entry.get("speedup_low"), entry.get("speedup_high")
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return None
    return float(low), float(high)


def judge_by_interval(
    reference: tuple[float, float], fresh: tuple[float, float]
) -> tuple[str, str]:
    """Reproduced when the two speedup intervals overlap."""
    overlap = max(reference[0], fresh[0]) <= min(reference[1], fresh[1])
    return (REPRODUCED if overlap else NOT_REPRODUCED), (
        f"95% intervals [{reference[0]:.3f}, {reference[1]:.3f}] and "
        f"[{fresh[0]:.3f}, {fresh[1]:.3f}] {'overlap' if overlap else 'do not overlap'}"
    )


def judge_by_model(check: dict[str, Any], tolerance: float) -> tuple[str, str]:
    """Reproduced when the fresh model's leave-one-out error is within ``tolerance``."""
    predicted, error = check["predicted_speedup"], check["error"]
    within = abs(error) <= tolerance
    return (REPRODUCED if within else NOT_REPRODUCED), (
        f"this run's speedup model predicts {predicted:.3f} without the level's timings, "
        f"error {error:+.1%}; its leave-one-out error on the reference was up to "
        f"{tolerance:.1%}"
    )


def verify_speedups(
    stage: str,
    reference: dict[str, Any],
    fresh: dict[str, Any],
    reference_model: dict[str, Any],
    fresh_model: dict[str, Any],
    host: tuple[bool, str],
) -> list[SpeedupVerdict]:
    """Verdicts of every SD level both throughput.json mappings hold a speedup for.

    Args:
        stage: The stage's name, for the lines.
        reference: The reference's throughput levels.
        fresh: The fresh run's throughput levels.
        reference_model: The reference's speedup_model.json ({} without one).
        fresh_model: The fresh run's speedup_model.json ({} without one).
        host: :func:`same_host` of the two runs' provenance.
    """
    tolerances = model_tolerances(reference_model)
    checks = fresh_model.get("levels") or {}
    is_same_host, how = host
    out = []
    for level in sorted(set(reference) & set(fresh)):
        ref_speedup, new_speedup = reference[level].get("speedup"), fresh[level].get("speedup")
        if ref_speedup is None or new_speedup is None:
            continue
        ref_interval, new_interval = _interval(reference[level]), _interval(fresh[level])
        check = checks.get(level)
        tolerance = tolerances.get(check["drafter"]) if check else None
        if is_same_host and ref_interval and new_interval:
            verdict, detail = judge_by_interval(ref_interval, new_interval)
            rule = INTERVAL
        elif check is not None and tolerance is not None and check.get("error") is not None:
            verdict, detail = judge_by_model(check, tolerance)
            where = f"another host: {how}" if not is_same_host else "not in rounds in both runs"
            detail = f"{where}; {detail}"
            rule = MODEL
        else:
            missing = (
                "no paired interval on both sides" if is_same_host else f"another host ({how})"
            )
            verdict, rule = UNTESTABLE, ""
            detail = f"{missing}, and no speedup-model check of the level to judge it by"
        out.append(SpeedupVerdict(stage, level, ref_speedup, new_speedup, verdict, rule, detail))
    return out


def speedup_tally(verdicts: list[SpeedupVerdict]) -> str:
    """``speedups: N reproduced (a by interval, b by model), M not reproduced, U untestable``."""
    if not verdicts:
        return "speedups: none to compare"

    def count(verdict: str, rule: str | None = None) -> int:
        return sum(v.verdict == verdict and rule in (None, v.rule) for v in verdicts)

    parts = []
    for verdict in (REPRODUCED, NOT_REPRODUCED):
        rules = ", ".join(f"{count(verdict, r)} by {r}" for r in (INTERVAL, MODEL))
        parts.append(f"{count(verdict)} {verdict.replace('_', ' ')} ({rules})")
    parts.append(f"{count(UNTESTABLE)} untestable")
    return "speedups: " + ", ".join(parts)
