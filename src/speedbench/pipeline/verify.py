"""Does a fresh run reproduce a committed reference? One verdict per figure and one overall.

Greedy acceptance is a function of the token ids, the weights and the arithmetic. Where the
arithmetic is the same (same dtype, same CPU kernel family, same engine version, and float32 or
batch size 1, since bf16 rounding at batch size > 1 depends on which requests share a step), a
figure must match **exactly**. Elsewhere outputs may legitimately drift, and a level is judged
by a paired test over its questions: the bootstrap interval of the mean difference of
per-question AL (SPEED-Bench's view) must contain 0, overall and in every category of at least
two questions. A category of one question has no spread to resample: its figures are judged by
the level's test, and the verdict says so. A level of one question has no test at all (a
bootstrap over one value fails any change): its differing figures are ``untestable``, which
is reported and counted but decides nothing. Verdicts:

- ``exact``: the figure equals the reference;
- ``reproduced``: it differs where exactness is not promised, and the paired test holds;
- ``not_reproduced``: it differs where exactness is promised, the paired test fails, or the
  reference holds no per-question data to test with; or the level is missing;
- ``untestable``: it differs where exactness is not promised, in a level of fewer than two
  questions; it does not enter the overall verdict.

A reference records what its exactness rests on in ``provenance.json`` next to its
``acceptance.json``: the dtype, the engine and its version, the CPU's kernel family and any
variable that capped the kernels' instruction set below it (``host_cpu.kernel_caps``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from speedbench.config import ConfigError
from speedbench.figures import Interval
from speedbench.hostcheck.cpu import format_kernel_caps
from speedbench.metrics.bootstrap import bootstrap_ci
from speedbench.pipeline.stages import (
    ACCEPTANCE_FILE,
    PROVENANCE_FILE,
    SPEEDUP_FILE,
    THROUGHPUT_FILE,
    stage_levels,
    upgrade,
)
from speedbench.pipeline.verify_speedup import (
    SpeedupVerdict,
    same_host,
    speedup_tally,
    verify_speedups,
)
from speedbench.provenance import SweepProvenance

EXACT, REPRODUCED, NOT_REPRODUCED = "exact", "reproduced", "not_reproduced"
UNTESTABLE = "untestable"
# A bootstrap over fewer questions than this is one point: any change would fail it.
MIN_QUESTIONS_TO_TEST = 2
NOT_COMPARABLE = "not_comparable"


@dataclass(frozen=True)
class FigureVerdict:
    """One figure of one level: the two values and the verdict."""

    level: str
    figure: str
    reference: Any
    measured: Any
    verdict: str
    detail: str = ""

    def line(self) -> str:
        """One line for the terminal."""
        tail = f" ({self.detail})" if self.detail else ""
        return (
            f"{self.verdict.upper():>14} {self.level} {self.figure}: reference {self.reference}, "
            f"measured {self.measured}{tail}"
        )


def exact_contract(
    reference: SweepProvenance | None, fresh: SweepProvenance | None
) -> tuple[bool, str]:
    """Whether the two runs share the arithmetic that makes greedy outputs equal, and why not."""
    if reference is None:
        return False, "the reference records no provenance"
    fresh = fresh or SweepProvenance()
    diffs = [
        f"{key} {getattr(reference, key)} vs {getattr(fresh, key)}"
        for key in ("dtype", "engine")
        if getattr(reference, key) != getattr(fresh, key)
    ]
    ref_cpu, new_cpu = reference.host_cpu, fresh.host_cpu
    ref_family = ref_cpu.kernel_family if ref_cpu else None
    new_family = new_cpu.kernel_family if new_cpu else None
    if ref_family != new_family:
        diffs.append(f"CPU kernels {ref_family} vs {new_family}")
    # A kernel cap (ONEDNN_MAX_CPU_ISA=AVX, ...) runs other kernels on the same CPU.
    ref_caps = ref_cpu.kernel_caps if ref_cpu else {}
    new_caps = new_cpu.kernel_caps if new_cpu else {}
    if ref_caps != new_caps:
        ref_text, new_text = (format_kernel_caps(c) or "none" for c in (ref_caps, new_caps))
        diffs.append(f"kernel caps {ref_text} vs {new_text}")
    if set(reference.engine_versions.values()) != set(fresh.engine_versions.values()):
        diffs.append("engine version")
    return (not diffs), "; ".join(diffs)


def protocol_difference(reference: SweepProvenance | None, fresh: SweepProvenance | None) -> str:
    """How the generation protocols of two runs differ ('' if alike or not both recorded).

    References written before the protocol was recorded carry none; they are judged as before.
    """
    ref = reference.protocol if reference else None
    new = fresh.protocol if fresh else None
    return ref.difference(new) if ref and new else ""


def paired_interval(
    reference: dict[str, float], fresh: dict[str, float], confidence: float = 0.95
) -> tuple[Interval, int]:
    """Bootstrap interval of mean(fresh - reference) over the questions both measured."""
    common = sorted(set(reference) & set(fresh))
    diffs = np.array([fresh[q] - reference[q] for q in common], dtype=float)
    if len(diffs) == 0:
        return Interval.undefined(confidence), 0
    if np.all(diffs == diffs[0]):
        v = float(diffs[0])
        return Interval(value=v, low=v, high=v, confidence=confidence), len(diffs)
    ci = bootstrap_ci(lambda idx: float(diffs[idx].mean()), len(diffs), confidence=confidence)
    return ci, len(diffs)


def _contains_zero(ci: Interval) -> bool:
    return ci.low is not None and ci.high is not None and ci.low <= 0.0 <= ci.high


def _leaves(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _leaves(a.get(k), b.get(k), f"{path}.{k}" if path else k)
        return out
    return [(path, a, b)]


def _batch_size(level: str) -> int:
    """The batch size of a ``<config>/<split>/bs<N>`` key.

    0 for a request rate (``rate<R>``): its requests share engine steps as they arrive.
    """
    tail = level.rsplit("/bs", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def verify_level(
    level: str, reference: dict[str, Any], fresh: dict[str, Any], exact_holds: bool, why: str
) -> list[FigureVerdict]:
    """Verdicts of every figure of one level (``exact_holds``: equality is promised here)."""
    figures = [
        (path, ref, new)
        for path, ref, new in _leaves(reference, fresh)
        if ".questions." not in f".{path}." and ref is not None  # per-question data: test input
    ]
    differing = [(p, r, n) for p, r, n in figures if r != n]
    if not differing:
        return [FigureVerdict(level, p, r, n, EXACT) for p, r, n in figures]
    paired = _paired_verdicts(level, reference, fresh)
    out = []
    for path, ref, new in figures:
        if ref == new:
            out.append(FigureVerdict(level, path, ref, new, EXACT))
        elif exact_holds:
            out.append(
                FigureVerdict(level, path, ref, new, NOT_REPRODUCED, "exactness is promised here")
            )
        else:
            verdict, detail = paired.get(_category_of(path), paired.get("", (NOT_REPRODUCED, "")))
            out.append(FigureVerdict(level, path, ref, new, verdict, f"{why}; {detail}"))
    return out


def _category_of(path: str) -> str:
    """The category a figure belongs to ('' for the level as a whole)."""
    parts = path.split(".")
    return parts[2] if len(parts) >= 3 and parts[1] == "by_category" else ""


def _paired_verdicts(
    level: str, reference: dict[str, Any], fresh: dict[str, Any]
) -> dict[str, tuple[str, str]]:
    """Paired test of per-question AL, overall ('') and per category."""
    ref_q = (reference.get("speed_bench") or {}).get("questions") or {}
    new_q = (fresh.get("speed_bench") or {}).get("questions") or {}
    if not ref_q or not new_q:
        return {"": (NOT_REPRODUCED, "no per-question data in the reference to test with")}
    groups: dict[str, tuple[dict[str, float], dict[str, float]]] = {"": ({}, {})}
    for source, slot in ((ref_q, 0), (new_q, 1)):
        for qid, entry in source.items():
            groups[""][slot][qid] = entry["al"]
            groups.setdefault(entry["category"], ({}, {}))[slot][qid] = entry["al"]
    out = {}
    for name, (ref, new) in groups.items():
        ci, n = paired_interval(ref, new)
        if name and n < MIN_QUESTIONS_TO_TEST:
            continue  # judged with the level, below
        if not name and 0 < n < MIN_QUESTIONS_TO_TEST:
            detail = f"{n} question in the level: no paired test, the verdict does not count it"
            return {"": (UNTESTABLE, detail)}
        ok = n > 0 and _contains_zero(ci)
        detail = (
            f"paired over {n} questions: mean difference {ci.value:+.4f}, "
            f"95% CI [{ci.low:+.4f}, {ci.high:+.4f}]"
        )
        out[name] = (REPRODUCED if ok else NOT_REPRODUCED, detail)
    level_verdict, level_detail = out[""]
    for name in [n for n in groups if n not in out]:
        out[name] = (level_verdict, f"{level_detail}; {name} alone has too few questions to test")
    # A level whose overall test fails fails every figure, whatever its category says.
    if level_verdict == NOT_REPRODUCED:
        out = {name: (NOT_REPRODUCED, detail) for name, (_, detail) in out.items()}
    return out


def verify(
    reference: dict[str, Any],
    fresh: dict[str, Any],
    reference_provenance: SweepProvenance | None,
    fresh_provenance: SweepProvenance | None,
) -> list[FigureVerdict]:
    """Verdicts of every figure of every level of two acceptance.json mappings."""
    reference, fresh = upgrade(reference), upgrade(fresh)
    protocol = protocol_difference(reference_provenance, fresh_provenance)
    if protocol:
        return [
            FigureVerdict(level, "*", "", "", NOT_COMPARABLE, f"generation protocol: {protocol}")
            for level in sorted(set(reference) & set(fresh))
        ]
    holds, why = exact_contract(reference_provenance, fresh_provenance)
    if holds:
        why = ""
    dtype = reference_provenance.dtype if reference_provenance else None
    out = []
    for level in sorted(set(reference) | set(fresh)):
        if level not in fresh:
            out.append(FigureVerdict(level, "*", "present", "missing", NOT_REPRODUCED))
            continue
        if level not in reference:
            continue  # measured beyond the reference: nothing to reproduce
        # Below float32 (bf16, a quantised GGUF), rounding at batch size > 1 depends on which
        # requests share a step: llama.cpp's bs-4 levels differ between two runs on one host.
        promised = holds and (dtype == "float32" or _batch_size(level) == 1)
        out += verify_level(
            level,
            reference[level],
            fresh[level],
            promised,
            why or f"dtype {dtype} at batch size > 1",
        )
    return out


def overall(verdicts: list[FigureVerdict]) -> str:
    """The first of not_comparable, not_reproduced, reproduced that any figure has, else exact.

    ``untestable`` figures (levels of one question) do not decide it.
    """
    verdicts = [v for v in verdicts if v.verdict != UNTESTABLE]
    kinds = {v.verdict for v in verdicts}
    if NOT_COMPARABLE in kinds:
        return NOT_COMPARABLE
    if NOT_REPRODUCED in kinds or not verdicts:
        return NOT_REPRODUCED
    return REPRODUCED if REPRODUCED in kinds else EXACT


@dataclass(frozen=True)
class ReferenceCheck:
    """A results folder's stages against a committed reference: verdicts and the one-line tally."""

    stages: list[str]
    verdicts: list[FigureVerdict]
    verdict: str
    line: str
    speedups: list[SpeedupVerdict] = field(default_factory=list)
    speedup_line: str = ""


def check_reference(reference: Path, results: Path) -> ReferenceCheck:
    """Verify every stage of ``reference`` (folders with acceptance.json) against ``results``.

    Raises:
        ConfigError: The reference has no stage, or a stage is missing from ``results``.
    """
    stages = sorted(p.parent.name for p in reference.glob(f"*/{ACCEPTANCE_FILE}"))
    if not stages:
        raise ConfigError(f"no */{ACCEPTANCE_FILE} under the reference {reference}")

    def read(path: Path) -> dict[str, Any]:
        return json.loads(path.read_text()) if path.exists() else {}

    verdicts: list[FigureVerdict] = []
    speedups: list[SpeedupVerdict] = []
    for stage in stages:
        fresh = results / stage / ACCEPTANCE_FILE
        if not fresh.exists():
            raise ConfigError(f"{fresh} is missing; run the pipeline first")
        ref_prov, new_prov = (
            SweepProvenance.read(folder / stage / PROVENANCE_FILE)
            for folder in (reference, results)
        )
        verdicts += verify(
            read(reference / stage / ACCEPTANCE_FILE), read(fresh), ref_prov, new_prov
        )
        ref_thr, new_thr = (
            stage_levels(read(folder / stage / THROUGHPUT_FILE)) for folder in (reference, results)
        )
        speedups += verify_speedups(
            stage,
            ref_thr,
            new_thr,
            read(reference / stage / SPEEDUP_FILE),
            read(results / stage / SPEEDUP_FILE),
            same_host(ref_prov, new_prov),
        )
    kinds = (EXACT, REPRODUCED, NOT_REPRODUCED, UNTESTABLE, NOT_COMPARABLE)
    counts = {kind: sum(v.verdict == kind for v in verdicts) for kind in kinds}
    counts = {
        kind: n for kind, n in counts.items() if n or kind not in (NOT_COMPARABLE, UNTESTABLE)
    }
    verdict = overall(verdicts)
    tally = ", ".join(f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items())
    line = (
        f"verdict: {verdict.replace('_', ' ')} against {reference} ({', '.join(stages)}: {tally})"
    )
    return ReferenceCheck(stages, verdicts, verdict, line, speedups, speedup_tally(speedups))
