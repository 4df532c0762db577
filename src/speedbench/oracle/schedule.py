"""A draft-length schedule by batch size, in the form each engine loads.

:class:`~speedbench.oracle.recommend.KSchedule` holds inclusive batch-size ranges with the
best k of each (0: SD off). Engines take it differently:

- **vLLM** reads it at runtime: ``SpeculativeConfig.num_speculative_tokens_per_batch_size``,
  a list of inclusive ``(range_start, range_end, num_speculative_tokens)`` (vLLM 0.32,
  ``vllm/config/speculative.py``, expanded by ``v1/spec_decode/dynamic/utils.py``: the first
  range starts at 1, ranges do not overlap, a k of 0 turns drafting off, and no range's k is
  above ``num_speculative_tokens``, which is therefore the schedule's largest k). One
  ``--speculative-config`` JSON serves every batch size.
- **SGLang** fixes ``--speculative-num-steps`` at launch: one launch per range, its
  ``--max-running-requests`` the range's end, so a deployment routes a batch size to the
  server sized for it.

The flags come from the engines' own adapters (:mod:`speedbench.engines.vllm`,
:mod:`speedbench.engines.sglang`), so a schedule uses the same spellings as a sweep, and the
contract tests check both with the engines' own code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speedbench.config import SpecConfig

Ranges = Sequence[tuple[int, int, int]]


def check_ranges(ranges: Ranges) -> None:
    """Refuse ranges no engine could load, in one line naming the fault."""
    if not ranges:
        raise ValueError("a schedule needs at least one batch-size range")
    expected = 1
    for first, last, k in ranges:
        if first != expected or last < first or k < 0:
            raise ValueError(
                f"schedule range ({first}, {last}, {k}): ranges must run from batch size 1 "
                "without gaps or overlaps, each first <= last, with k >= 0"
            )
        expected = last + 1


def _spec(
    method: str,
    k: int,
    draft_model: str | None,
    ngram: tuple[int, int] | None,
    options: dict[str, Any] | None = None,
) -> SpecConfig:
    if k == 0:
        return SpecConfig()
    lookup = {"prompt_lookup_min": ngram[0], "prompt_lookup_max": ngram[1]} if ngram else {}
    return SpecConfig(
        method=method,
        num_speculative_tokens=k,
        draft_model=draft_model,
        options=options or {},
        **lookup,
    )


def vllm_spec(
    method: str,
    ranges: Ranges,
    draft_model: str | None = None,
    ngram: tuple[int, int] | None = None,
) -> SpecConfig:
    """The one SD config a vLLM server runs the schedule with (SD off at every size: none).

    ``num_speculative_tokens`` is the schedule's largest k; the ranges ride in the config's
    engine options, so the sweep's own vLLM adapter writes them into ``--speculative-config``.
    """
    check_ranges(ranges)
    top = max(k for _, _, k in ranges)
    schedule = {"num_speculative_tokens_per_batch_size": [list(r) for r in ranges]}
    return _spec(method, top, draft_model, ngram, schedule)


def sglang_specs(
    method: str,
    ranges: Ranges,
    draft_model: str | None = None,
    ngram: tuple[int, int] | None = None,
) -> list[tuple[int, int, SpecConfig]]:
    """One SD config per range for SGLang, which fixes the draft length at launch."""
    check_ranges(ranges)
    return [(first, last, _spec(method, k, draft_model, ngram)) for first, last, k in ranges]


def engine_schedules(
    method: str,
    ranges: Ranges,
    draft_model: str | None = None,
    ngram: tuple[int, int] | None = None,
    sglang_image: str | None = None,
) -> dict[str, Any]:
    """The schedule for every engine that takes one: vLLM's config and SGLang's launches.

    SGLang's flags are those of the release ``sglang_image`` names (default: speedbench's
    pinned image), which the launches record.

    Raises:
        UnsupportedSpecError: A flag the SGLang release lacks (n-gram windows after 0.5.9).
    """
    from speedbench.engines.containers import container_spec
    from speedbench.engines.releases import image_release
    from speedbench.engines.sglang import speculative_args
    from speedbench.engines.vllm import speculative_config

    image = sglang_image or container_spec("sglang").image
    release = image_release(image)
    launches = [
        {"batch_sizes": [first, last], "k": spec.num_speculative_tokens,
         "args": [*speculative_args(spec, release), "--max-running-requests", str(last)]}
        for first, last, spec in sglang_specs(method, ranges, draft_model, ngram)
    ]  # fmt: skip
    return {
        "method": method,
        "ranges": [list(r) for r in ranges],
        "vllm": {
            "speculative_config": speculative_config(vllm_spec(method, ranges, draft_model, ngram))
        },
        "sglang": {"image": image, "launches": launches},
    }
