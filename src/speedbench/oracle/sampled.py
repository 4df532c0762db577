"""Acceptance at temperature > 0: a sampled baseline replayed under speculative sampling.

A no-SD level sampled at temperature T gives answers distributed as the target's own at T, the
distribution speculative sampling also outputs (it is lossless in distribution). Teacher-forcing
the target and the draft along those answers gives, at every answer position t, the target's
``p_t`` and the draft's ``q_t`` (softmax of logits / T), and from them the acceptance of the
draft's proposal there, in two rules that engines use:

- **probabilistic draft** (Leviathan et al.; vLLM's ``draft_sample_method: probabilistic``):
  the draft samples its proposal from ``q`` and the target accepts it with
  ``min(1, p/q)``. The acceptance probability at a prefix is ``alpha = sum_x min(p(x), q(x))``;
  given that the answer's token there is ``x_t``, the chance it came from an accepted draft
  is ``beta = min(p, q)(x_t) / p(x_t)``.
- **greedy draft** (vLLM's default, ``draft_sample_method: greedy``): the draft proposes its
  argmax ``d`` and its probabilities count as one-hot, so ``alpha = p(d)`` and ``beta = 1``
  where ``x_t == d``, else 0 (the greedy oracle's match, along a sampled answer).

A decode step drafts k tokens from position t on; with acceptances a_t, ..., it accepts j of
them with probability ``a_t ... a_(t+j-1) (1 - a_(t+j))`` (all k: the product of k) and emits
j + 1 tokens. :func:`expected_steps` sums that over an answer by dynamic programming; the
answer's first token comes from the prefill, one step of its own as SPEED-Bench counts it.

Two predictions per question, by which acceptance the steps use:

- ``beta`` (conditional on the sampled answer): given the answer's tokens, a position's
  acceptance events are independent with probability ``beta``, so the expected steps of *this*
  answer are exact, and their mean over sampled answers is the SD run's expectation (engine
  numerics aside);
- ``alpha`` (the textbook per-position acceptance probability): replaces each position's
  event by its prefix-level probability, ignoring that the realised token tells which way the
  event went; the approximation the literature's expected-AL formula makes.

The predicted AL of a question is its tokens (EOS cut, as the speed_bench view cuts it) over
its expected steps: the ratio of expectations, not the expectation of the ratio.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from speedbench.metrics.bootstrap import mean_ci

DraftSampling = Literal["greedy", "probabilistic"]
Rule = Literal["beta", "alpha"]


@dataclass(frozen=True)
class PositionAcceptance:
    """One answer's per-position acceptance terms (position 0, the prefill's, included).

    Attributes:
        greedy_alpha: ``p(argmax q)``.
        greedy_beta: 1.0 where the answer token is the draft's argmax, else 0.0.
        prob_alpha: ``sum_x min(p(x), q(x))``.
        prob_beta: ``min(p, q)(x_t) / p(x_t)``.
    """

    greedy_alpha: list[float]
    greedy_beta: list[float]
    prob_alpha: list[float]
    prob_beta: list[float]

    def rule(self, sampling: DraftSampling, rule: Rule) -> list[float]:
        """The acceptance terms of one draft-sampling method and one rule."""
        return getattr(self, f"{'greedy' if sampling == 'greedy' else 'prob'}_{rule}")


def acceptance_terms(
    target_logits: Any, draft_logits: Any, answer: Sequence[int], temperature: float
) -> PositionAcceptance:
    """Per position, both draft-sampling methods' acceptance terms at ``temperature``.

    Raises:
        ValueError: A temperature that is not positive, or mismatched shapes.
    """
    import torch

    if temperature <= 0:
        raise ValueError(f"sampled acceptance needs a temperature > 0, got {temperature}")
    if target_logits.shape[0] != len(answer) or draft_logits.shape[0] != len(answer):
        raise ValueError(
            f"{len(answer)} answer tokens but logits for {target_logits.shape[0]} (target) "
            f"and {draft_logits.shape[0]} (draft) positions"
        )
    # A draft whose head is wider than the target's (padded vocabularies) proposes only ids the
    # target has; the columns beyond the narrower one carry no probability either side.
    width = min(target_logits.shape[1], draft_logits.shape[1])
    p = torch.softmax(target_logits[:, :width].double() / temperature, dim=-1)
    q = torch.softmax(draft_logits[:, :width].double() / temperature, dim=-1)
    x = torch.tensor(list(answer), dtype=torch.long)[:, None]
    d = q.argmax(dim=-1, keepdim=True)
    both = torch.minimum(p, q)
    p_x = p.gather(1, x).squeeze(1)
    return PositionAcceptance(
        greedy_alpha=p.gather(1, d).squeeze(1).tolist(),
        greedy_beta=(d.squeeze(1) == x.squeeze(1)).double().tolist(),
        prob_alpha=both.sum(dim=-1).tolist(),
        prob_beta=(both.gather(1, x).squeeze(1) / p_x.clamp_min(1e-300)).tolist(),
    )


def expected_steps(accept: Sequence[float], k: int) -> float:
    """Expected decode steps to produce answer tokens 1..n-1 drafting k per step.

    ``accept[t]`` is the acceptance of a draft proposing answer token t (``accept[0]``, the
    prefill's token, is not used). A step from t accepts j < m drafts with probability
    ``accept[t] ... accept[t+j-1] (1 - accept[t+j])`` and all m with their product, where m is
    k or the tokens left, and emits j + 1 tokens.
    """
    n = len(accept)
    if k < 1:
        return float(max(n - 1, 0))
    after = [0.0] * (n + 1)  # after[t]: expected steps from answer position t to the end
    for t in range(n - 1, 0, -1):
        m = min(k, n - 1 - t)
        steps, run = 1.0, 1.0
        for j in range(m):
            steps += run * (1.0 - accept[t + j]) * after[t + j + 1]
            run *= accept[t + j]
        steps += run * after[min(t + m + 1, n)]
        after[t] = steps
    return after[1] if n > 1 else 0.0


def predicted_al(accept: Sequence[float], k: int, ends_at_eos: bool) -> float:
    """A question's predicted SPEED-Bench AL: tokens (EOS cut) over the prefill step + decode."""
    tokens = len(accept) - (1 if ends_at_eos else 0)
    steps = 1.0 + expected_steps(accept, k)
    return tokens / steps if tokens > 0 else math.nan


class SampledK(BaseModel):
    """Predicted AL at one k for both draft-sampling methods and both rules."""

    model_config = ConfigDict(extra="forbid")

    k: int
    # "<sampling>/<rule>" -> mean over questions, with its 95 % interval.
    al: dict[str, float]
    al_low: dict[str, float]
    al_high: dict[str, float]


class SampledCheck(BaseModel):
    """A measured SD level at the same temperature beside the prediction for its questions."""

    model_config = ConfigDict(extra="forbid")

    level: str
    k: int
    batch_size: int
    draft_sampling: DraftSampling
    questions: int
    measured_al: float
    measured_low: float
    measured_high: float
    # rule -> the prediction on the same questions (mean and interval)
    predicted_al: dict[str, float]
    predicted_low: dict[str, float]
    predicted_high: dict[str, float]

    def overlaps(self, rule: Rule) -> bool:
        """Whether the measured and the predicted intervals overlap."""
        return self.measured_low <= self.predicted_high[rule] and (
            self.predicted_low[rule] <= self.measured_high
        )


class SampledOracle(BaseModel):
    """The sampled oracle of one baseline level: AL by k, and checks against measured levels."""

    model_config = ConfigDict(extra="forbid")

    baseline: str
    temperature: float
    target: str
    draft: str
    dtype: str
    questions: int
    seconds: float
    by_k: list[SampledK]
    checks: list[SampledCheck] = []


@dataclass
class SampledPass:
    """Per question (prompt id), its acceptance terms and whether its answer ended at EOS."""

    terms: dict[str, PositionAcceptance] = field(default_factory=dict)
    ends_at_eos: dict[str, bool] = field(default_factory=dict)
    seconds: float = 0.0


def sampled_pass(
    target: Any,
    draft: Any,
    records: Sequence[Any],
    temperature: float,
    eos_id: int | None,
    *,
    show_progress: bool = True,
) -> SampledPass:
    """Both models teacher-forced along a sampled baseline's answers (first turns, succeeded).

    Raises:
        ValueError: No usable record, or a record without its prompt's token ids.
    """
    from speedbench.oracle.draft import answer_logits

    usable = [r for r in records if r.ok and r.turn == 0 and not r.warmup and r.output_token_ids]
    if not usable:
        raise ValueError("the baseline has no successful first-turn answer to replay")
    if any(r.prompt_token_ids is None for r in usable):
        raise ValueError("the baseline's records lack prompt token ids (record them to replay)")
    prompts = [list(r.prompt_token_ids) for r in usable]
    answers = [list(r.output_token_ids) for r in usable]
    started = time.perf_counter()
    out = SampledPass()
    passes = zip(
        answer_logits(target, prompts, answers, show_progress=show_progress, desc="target pass"),
        answer_logits(draft, prompts, answers, show_progress=False),
        strict=True,
    )
    for (i, p_logits), (j, q_logits) in passes:
        if i != j:
            raise RuntimeError("the two passes visited requests in different orders")
        record = usable[i]
        out.terms[record.prompt_id] = acceptance_terms(p_logits, q_logits, answers[i], temperature)
        out.ends_at_eos[record.prompt_id] = eos_id is not None and answers[i][-1] == eos_id
    out.seconds = time.perf_counter() - started
    return out


def per_question_al(
    sampled: SampledPass, k: int, sampling: DraftSampling, rule: Rule
) -> dict[str, float]:
    """Each question's predicted AL at k."""
    return {
        qid: predicted_al(terms.rule(sampling, rule), k, sampled.ends_at_eos[qid])
        for qid, terms in sampled.terms.items()
    }


def _mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    kept = [v for v in values if math.isfinite(v)]
    if not kept:
        return math.nan, math.nan, math.nan
    ci = mean_ci(kept)
    return _nan(ci.value), _nan(ci.low), _nan(ci.high)


def _nan(value: float | None) -> float:
    return math.nan if value is None else value


def by_k(sampled: SampledPass, ks: Sequence[int]) -> list[SampledK]:
    """Predicted AL for every k, both draft-sampling methods and both rules."""
    out = []
    for k in ks:
        al, low, high = {}, {}, {}
        for sampling in ("greedy", "probabilistic"):
            for rule in ("beta", "alpha"):
                key = f"{sampling}/{rule}"
                al[key], low[key], high[key] = _mean_interval(
                    list(per_question_al(sampled, k, sampling, rule).values())
                )
        out.append(SampledK(k=k, al=al, al_low=low, al_high=high))
    return out


def check_level(
    sampled: SampledPass,
    level: str,
    measured: Mapping[str, float],
    k: int,
    batch_size: int,
    sampling: DraftSampling,
) -> SampledCheck:
    """A measured level's per-question AL (speed_bench view) beside the prediction for them.

    Raises:
        ValueError: The level shares no question with the baseline.
    """
    shared = sorted(set(measured) & set(sampled.terms))
    if not shared:
        raise ValueError(f"{level}: no question in common with the baseline")
    m, m_low, m_high = _mean_interval([measured[q] for q in shared])
    predicted, low, high = {}, {}, {}
    for rule in ("beta", "alpha"):
        per_q = per_question_al(sampled, k, sampling, rule)
        predicted[rule], low[rule], high[rule] = _mean_interval([per_q[q] for q in shared])
    return SampledCheck(
        level=level,
        k=k,
        batch_size=batch_size,
        draft_sampling=sampling,
        questions=len(shared),
        measured_al=m,
        measured_low=m_low,
        measured_high=m_high,
        predicted_al=predicted,
        predicted_low=low,
        predicted_high=high,
    )


def run_sampled_oracle(
    baseline: Path,
    target_path: str,
    draft_path: str,
    dtype: str,
    ks: Sequence[int],
    measured: Sequence[Path] = (),
    temperature: float | None = None,
) -> SampledOracle:
    """The sampled oracle of a baseline level sampled at T > 0, and its checks.

    The temperature is the baseline's own (its ``metrics.json``) unless given; a measured level
    at another temperature is refused, as is a greedy baseline.

    Raises:
        ValueError: A greedy baseline, a level at another temperature, no shared question.
    """
    from speedbench.oracle.draft import load_draft
    from speedbench.records import read_parquet
    from speedbench.results import LevelMetrics

    config = LevelMetrics.read(baseline / "metrics.json").config
    level_t = config.temperature
    temperature = level_t if temperature is None else temperature
    if temperature <= 0 or level_t <= 0:
        raise ValueError(
            f"{baseline} was measured at temperature {level_t}: the sampled oracle replays a "
            "baseline sampled at T > 0 (`speedbench oracle` replays a greedy one)"
        )
    if not math.isclose(temperature, level_t):
        raise ValueError(f"{baseline} was sampled at T = {level_t}, not {temperature}")
    eos = config.eos_token_id
    target = load_draft(target_path, dtype)
    draft = load_draft(draft_path, dtype)
    sampled = sampled_pass(
        target, draft, read_parquet(baseline / "records.parquet"), temperature,
        eos,
    )  # fmt: skip
    checks = []
    for level_dir in measured:
        metrics = LevelMetrics.read(level_dir / "metrics.json")
        spec = metrics.config.spec
        level_temp = metrics.config.temperature
        if not math.isclose(level_temp, temperature):
            raise ValueError(f"{level_dir}: measured at T = {level_temp}, not {temperature}")
        view = metrics.overall.views.get("speed_bench")
        if view is None or not spec.num_speculative_tokens:
            raise ValueError(f"{level_dir}: not an SD level with the speed_bench view")
        sampling = spec.options.get("draft_sample_method", "greedy")
        per_q = {q: v for q, v in view.per_unit.items() if v is not None and "@r" not in q}
        k, batch_size = spec.num_speculative_tokens, metrics.config.batch_size or 1
        checks.append(check_level(sampled, str(level_dir), per_q, k, batch_size, sampling))
    return SampledOracle(
        baseline=str(baseline),
        temperature=temperature,
        target=target_path,
        draft=draft_path,
        dtype=dtype,
        questions=len(sampled.terms),
        seconds=sampled.seconds,
        by_k=by_k(sampled, ks),
        checks=checks,
    )


def render_sampled(oracle: SampledOracle) -> list[str]:
    """The sampled oracle as markdown tables: AL by k, then each check."""
    keys = ["greedy/beta", "greedy/alpha", "probabilistic/beta", "probabilistic/alpha"]
    lines = [
        f"Sampled oracle at T = {oracle.temperature:g}: {oracle.questions} questions of "
        f"{oracle.baseline}; target and draft teacher-forced in {oracle.dtype} "
        f"({oracle.seconds:.0f} s). AL: SPEED-Bench's rule, mean over questions [95 % interval].",
        "",
        "| k | " + " | ".join(f"{key} draft" for key in keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for row in oracle.by_k:
        cells = [f"{row.al[key]:.3f} [{row.al_low[key]:.3f}, {row.al_high[key]:.3f}]"
                 for key in keys]  # fmt: skip
        lines.append(f"| {row.k} | " + " | ".join(cells) + " |")
    if oracle.checks:
        lines += [
            "",
            "| level | k | bs | draft sampling | questions | measured AL | predicted (beta) "
            "| overlap | predicted (alpha) | overlap |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for c in oracle.checks:
            pred = {
                rule: f"{c.predicted_al[rule]:.3f} [{c.predicted_low[rule]:.3f}, "
                f"{c.predicted_high[rule]:.3f}]"
                for rule in ("beta", "alpha")
            }
            lines.append(
                f"| {c.level} | {c.k} | {c.batch_size} | {c.draft_sampling} | {c.questions} | "
                f"{c.measured_al:.3f} [{c.measured_low:.3f}, {c.measured_high:.3f}] | "
                f"{pred['beta']} | {'yes' if c.overlaps('beta') else 'no'} | "
                f"{pred['alpha']} | {'yes' if c.overlaps('alpha') else 'no'} |"
            )
    return lines
