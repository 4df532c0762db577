"""Does the step-time model's context term hold SD speedups on long prompts? With and without.

The speedup model (docs/oracle.md) prices every engine iteration by its sequences, tokens and,
since the context term, the KV positions its decode and verify steps attend over
(``speedbench.oracle.steptime``). This refits a finished sweep's speedup model twice on its own
records, in one run: once as it is, once with every iteration's context set to 0 (the model
before the term), and prints each measured SD level's leave-one-out check under both: the
predicted speedup, the measured one (output throughput SD / baseline, the level's own), and
the error. The sweep needs no-SD levels at two prompt lengths for the term to be told apart
from a sequence's cost (e.g. MT-Bench's short prompts beside a 1k-token throughput bucket).

Usage: ``python benchmarks/context_term.py RESULTS_DIR`` (a sweep's output folder, the one
holding ``summary.json`` and ``oracle/``). It rewrites ``oracle/speedup_model.json`` there,
last with the context term, as ``speedbench tune --refit`` would.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any
from unittest import mock

from speedbench.oracle import steptime
from speedbench.oracle.in_sweep import refit_speedup_model


def checks(out: Path, with_context: bool) -> tuple[dict[str, tuple[float, float]], float]:
    """Each SD level's (predicted, measured) speedup, and the target's per-context cost."""
    original = steptime._iterations

    def without(*args: Any, **kwargs: Any) -> list[steptime.Iteration]:  # no KV read
        return [dataclasses.replace(it, context=0) for it in original(*args, **kwargs)]

    with mock.patch.object(steptime, "_iterations", original if with_context else without):
        model = refit_speedup_model(out)
    if model is None:
        raise SystemExit(f"{out}: the sweep ran no oracle, so it has no speedup model")
    out_checks = {
        c.level: (c.predicted_speedup, c.measured_speedup)
        for c in model.checks
        if c.predicted_speedup is not None and c.measured_speedup is not None
    }
    return out_checks, model.target.per_context_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", help="a sweep's output folder")
    out = Path(parser.parse_args().results)
    before, _ = checks(out, with_context=False)
    after, per_context = checks(out, with_context=True)
    print(f"target per-context cost: {per_context * 1e9:.1f} ns a token-position")
    print(f"{'level':34} {'measured':>9} {'no term':>16} {'context term':>16}")
    for level in sorted(after):
        predicted, measured = after[level]
        old = before.get(level, (float("nan"), measured))[0]
        print(f"{level:34} {measured:9.3f} {old:8.3f} ({old / measured - 1:+6.1%}) "
              f"{predicted:8.3f} ({predicted / measured - 1:+6.1%})")  # fmt: skip


if __name__ == "__main__":
    main()
