"""Acceptance profiles a deployment can carry: ``speculation_profile.json``, out and back in.

Model-Optimizer's specdec_bench is adding a versioned ``speculation_profile.json`` (PR #2247,
NVIDIA/Model-Optimizer; open when this was written) so a draft's acceptance travels with its
checkpoint. It publishes both per-position conventions under their own names, because its
consumers disagree: ``conditional_accept_rates[i]`` = P(draft i+1 accepted | the first i
were) and ``marginal_accept_rates[i]`` = P(the first i+1 all accepted), a step's acceptance
length counting the target's own bonus token (draft position i is length i + 2). With
``mean_accept_length`` the per-step mean, ``1 + sum(marginal)`` is that mean whenever no step
is longer than k + 1.

speedbench's views (:mod:`speedbench.metrics.views`) hold exactly these: ``conditional_ar``
and ``joint_ar`` per position are the two vectors, ``al_token_weighted`` the per-step mean,
``al_request_mean`` the per-request one. A profile is written from *one* named view (the
file says which, under ``measurement_conditions``), never mixed. Read back, a
``chain_analytic`` profile (a drafter whose first j proposals do not depend on how many more
follow: a draft model, EAGLE, MTP, prompt lookup) predicts AL at every k up to its own as
``1 + sum(marginal[:k])``; beyond its k nothing is known, and a ``measured_per_k`` profile
answers only at its k. Every predicted figure is shown beside the oracle's own at that k by
``speedbench profile``, with the error.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from speedbench.oracle.speedup import ReplayRequest

# Methods whose first j drafts are the same whatever k is (the profile extrapolates below k).
CHAIN_METHODS = ("draft_model", "eagle", "eagle3", "mtp", "ngram")
PROFILE_SUFFIX = ".speculation_profile.json"
LEVEL_KEY = re.compile(r"^(?P<oracle>oracle-)?(?P<method>[a-z0-9_]+)-k(?P<k>\d+)/(?P<split>[^/]+)/")
# Tolerances of the identities a profile must satisfy (its figures are rounded to 6 digits).
RATE_TOLERANCE = 1e-4
AL_TOLERANCE = 1e-3
# The golden ratio's fractional part: successive multiples fill [0, 1) evenly, so the steps a
# profile draws follow its distribution closely even over a few hundred steps.
GOLDEN = (5**0.5 - 1) / 2


class SpeculationProfile(BaseModel):
    """One draft length's acceptance, in ``speculation_profile.json``'s fields.

    Fields not named here (a peer's own metadata) are kept as they are.
    """

    model_config = ConfigDict(extra="allow")

    method: str = Field(description="The drafter: draft_model, eagle3, ngram, mtp, ...")
    num_speculative_tokens: int = Field(ge=1, description="k: drafts per verification step")
    conditional_accept_rates: list[float] = Field(
        description="P(draft i+1 accepted | the first i accepted), i = 0..k-1"
    )
    marginal_accept_rates: list[float] = Field(
        description="P(the first i+1 drafts all accepted), i = 0..k-1"
    )
    mean_accept_length: float = Field(description="Tokens per verification step, pooled")
    mean_accept_length_per_request: float | None = Field(
        default=None, description="The mean over requests of each request's own AL"
    )
    accept_length_model: Literal["chain_analytic", "measured_per_k"] = "chain_analytic"
    verification_method: Literal["longest_prefix", "block"] = "longest_prefix"
    measured: bool = Field(description="False: predicted (speedbench's oracle), not served")
    per_category: dict[str, dict[str, float]] = Field(default_factory=dict)
    measurement_conditions: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> SpeculationProfile:
        k = self.num_speculative_tokens
        cond, marg = self.conditional_accept_rates, self.marginal_accept_rates
        if len(cond) != k or len(marg) != k:
            raise ValueError(
                f"{len(cond)} conditional and {len(marg)} marginal rates for "
                f"num_speculative_tokens {k}: one of each per draft position"
            )
        if any(not 0.0 <= r <= 1.0 for r in [*cond, *marg] if not math.isnan(r)):
            raise ValueError("acceptance rates must lie in [0, 1]")
        if any(b > a + RATE_TOLERANCE for a, b in itertools.pairwise(marg)):
            raise ValueError(f"marginal_accept_rates {marg} rise with position: not a survival")
        running = 1.0
        for i, rate in enumerate(cond):
            running *= rate
            if abs(running - marg[i]) > RATE_TOLERANCE and not math.isnan(running):
                raise ValueError(
                    f"marginal_accept_rates[{i}] = {marg[i]} is not the product of the "
                    f"conditional rates up to it ({running:.6f}): the two conventions swapped?"
                )
        if self.verification_method == "longest_prefix":
            implied = 1.0 + sum(marg)
            if abs(implied - self.mean_accept_length) > AL_TOLERANCE:
                raise ValueError(
                    f"mean_accept_length {self.mean_accept_length} is not 1 + sum(marginal) = "
                    f"{implied:.6f}: a per-request mean in the per-step field?"
                )
        return self

    def al_at(self, k: int) -> float:
        """Predicted tokens per step at draft length ``k`` (per-step mean, pooled).

        Raises:
            ValueError: ``k`` beyond the profile's own, or another k of a ``measured_per_k``
                profile.
        """
        top = self.num_speculative_tokens
        if k == top:
            return self.mean_accept_length
        if not 1 <= k <= top:
            raise ValueError(f"the profile knows k <= {top}; k = {k} was never drafted")
        if (
            self.accept_length_model != "chain_analytic"
            or self.verification_method != "longest_prefix"
        ):
            raise ValueError(
                f"a {self.accept_length_model} profile of k = {top} predicts nothing at k = {k}"
            )
        return 1.0 + sum(self.marginal_accept_rates[:k])


def accepted_pmf(profile: SpeculationProfile, k: int) -> list[float]:
    """P(a step accepts exactly a drafts), a = 0..k, at draft length ``k``.

    Below the profile's own k by the chain rule: a step of k accepts min(a, k) of what the
    longer one would.
    """
    profile.al_at(k)  # refuses a k the profile cannot speak for
    survival = [1.0, *profile.marginal_accept_rates[:k], 0.0]
    return [max(survival[a] - survival[a + 1], 0.0) for a in range(k + 1)]


def profile_requests(
    baseline: Sequence[ReplayRequest], profile: SpeculationProfile, k: int, seed: int = 0
) -> list[ReplayRequest]:
    """The baseline's requests under SD at ``k``, their steps drawn from the profile.

    Each request keeps its prompt and answer length; after the prefill's token, its answer is
    cut into steps of ``accepted + 1`` tokens, the accepted counts following the profile's
    distribution at ``k`` in a deterministic low-discrepancy order (``seed`` shifts it), the
    last step cut by the answer's end. Every step drafts ``k`` (a profile does not say which
    prompt-lookup steps found no match). A ``speed_bench``-view profile counts the prefill
    step as a rejected one, so it drives a replay low by that share; a ``stream`` one does not.
    """
    pmf = accepted_pmf(profile, k)
    cdf = list(itertools.accumulate(pmf))
    u = (seed * GOLDEN) % 1.0
    out = []
    for request in baseline:
        left = len(request.chunks) - 1  # tokens after the prefill's
        chunks, drafted = [1], [0]
        while left > 0:
            u = (u + GOLDEN) % 1.0
            accepted = next((a for a, c in enumerate(cdf) if u < c), k)
            chunks.append(min(accepted + 1, left))
            drafted.append(k)
            left -= chunks[-1]
        out.append(ReplayRequest(request.prompt_tokens, tuple(chunks), tuple(drafted)))
    return out


def profile_of(
    view: Mapping[str, Any],
    method: str,
    k: int,
    measured: bool,
    conditions: Mapping[str, Any],
) -> SpeculationProfile:
    """The profile of one level's view (a ``ViewSummary`` as ``acceptance.json`` holds it).

    Raises:
        ValueError: The view has no per-position rates (SGLang's engine view, the server's).
    """
    if not view.get("joint_ar") or not view.get("conditional_ar"):
        raise ValueError(f"the {conditions.get('acceptance_view')} view has no per-position rates")
    categories = {
        name: {
            key: figures[key] for key in ("al_request_mean", "al_token_weighted") if key in figures
        }
        for name, figures in sorted((view.get("by_category") or {}).items())
    }
    return SpeculationProfile(
        method=method,
        num_speculative_tokens=k,
        conditional_accept_rates=[float(r) for r in view["conditional_ar"]],
        marginal_accept_rates=[float(r) for r in view["joint_ar"]],
        mean_accept_length=float(view["al_token_weighted"]),
        mean_accept_length_per_request=view.get("al_request_mean"),
        accept_length_model="chain_analytic" if method in CHAIN_METHODS else "measured_per_k",
        measured=measured,
        per_category=categories,
        measurement_conditions=dict(conditions),
    )


def export_profiles(
    levels: Mapping[str, Mapping[str, Any]], view: str, out: Path, source: str
) -> list[Path]:
    """One ``<level>.speculation_profile.json`` per SD level of a stage's acceptance figures.

    Args:
        levels: The stage's levels (``acceptance.json``'s ``levels``), by level key.
        view: The acceptance view the profiles are written from.
        out: The folder they are written to.
        source: What the figures came from, recorded in each profile.

    Raises:
        ValueError: No SD level holds the view with per-position rates.
    """
    written = []
    for key, views in sorted(levels.items()):
        match = LEVEL_KEY.match(key)
        if match is None or view not in views:
            continue
        conditions = {"acceptance_view": view, "level": key, "split": match["split"],
                      "source": source, "producer": "speedbench"}  # fmt: skip
        try:
            profile = profile_of(
                views[view], match["method"], int(match["k"]), not match["oracle"], conditions
            )
        except ValueError:
            continue
        path = out / (key.replace("/", "_") + PROFILE_SUFFIX)
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(profile.model_dump(mode="json"), indent=2) + "\n")
        written.append(path)
    if not written:
        raise ValueError(f"{source}: no SD level holds the {view} view with per-position rates")
    return written


def read_profile(path: Path) -> SpeculationProfile:
    """A ``speculation_profile.json`` (speedbench's or a peer's).

    Raises:
        ValueError: Unreadable, not JSON, or a profile that breaks its own identities; one
            line naming the file and the fault.
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a readable JSON profile ({exc})") from None
    try:
        return SpeculationProfile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "profile"
        raise ValueError(f"{path}: {where}: {first['msg']}") from None
