"""Hand-made acceptance views for summary rows in tests, in the one shape results use.

``views(average=2.5, category_al={"coding": 3.0})`` is what a level whose SPEED-Bench
Average_AL is 2.5 and whose coding Category_AL is 3.0 carries in ``SummaryRow.views``.
"""

from __future__ import annotations

from speedbench.figures import Interval
from speedbench.results import CategoryAL, QuestionAL
from speedbench.sweep_summary import ViewSummary


def views(
    *,
    average: float | None = None,
    pooled: float | None = None,
    category_al: dict[str, float] | None = None,
    category_ci: dict[str, tuple[float, float]] | None = None,
    questions: dict[str, tuple[str, float]] | None = None,
    speed_bench_ar: list[float] | None = None,
    stream: float | None = None,
    stream_by_category: dict[str, float] | None = None,
    counters: float | None = None,
    counters_ar: list[float] | None = None,
    engine: float | None = None,
) -> dict[str, ViewSummary]:
    """Views from the figures given (a view with none of its figures given is absent).

    Args:
        average: speed_bench Average_AL (its request mean).
        pooled: speed_bench's token-weighted AL.
        category_al: speed_bench Category_AL per category.
        category_ci: (low, high) of a category's Category_AL interval.
        questions: question id -> (category, its AL), speed_bench.
        speed_bench_ar: speed_bench's conditional AR per position.
        stream: the stream view's token-weighted AL.
        stream_by_category: the stream view's token-weighted AL per category.
        counters: the counters view's AL.
        counters_ar: the counters view's conditional AR per position.
        engine: the engine view's token-weighted AL.
    """
    out: dict[str, ViewSummary] = {}
    ci = category_ci or {}
    counts: dict[str, int] = {}
    for category, _ in (questions or {}).values():
        counts[category] = counts.get(category, 0) + 1
    if any(x is not None for x in (average, pooled, category_al, questions, speed_bench_ar)):
        out["speed_bench"] = ViewSummary(
            al_request_mean=average,
            al_token_weighted=pooled,
            conditional_ar=speed_bench_ar,
            by_category={
                c: CategoryAL(
                    al_request_mean=al,
                    al_request_mean_ci=(
                        Interval(value=al, low=ci[c][0], high=ci[c][1]) if c in ci else None
                    ),
                    count=counts.get(c),
                )
                for c, al in (category_al or {}).items()
            },
            questions={
                q: QuestionAL(category=c, al=al) for q, (c, al) in (questions or {}).items()
            },
        )
    if stream is not None or stream_by_category:
        out["stream"] = ViewSummary(
            al_token_weighted=stream,
            by_category={
                c: CategoryAL(al_token_weighted=al) for c, al in (stream_by_category or {}).items()
            },
        )
    if counters is not None or counters_ar:
        out["counters"] = ViewSummary(al_token_weighted=counters, conditional_ar=counters_ar)
    if engine is not None:
        out["engine"] = ViewSummary(al_token_weighted=engine)
    return out
