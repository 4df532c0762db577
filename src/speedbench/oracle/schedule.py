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
  server sized for it. From 0.5.23 (the oldest release checked that has it; 0.5.5 has not)
  EAGLE and EAGLE-3 servers also take ``--speculative-adaptive`` with
  ``--speculative-adaptive-config <json>``: tiers keyed by their smallest batch size, a batch
  routed to the tier with the largest key not above it, each tier choosing among its
  ``candidate_steps`` (``speculative/adaptive_spec_params.py``). One candidate per tier pins
  the tier to the schedule's k, so one server follows the whole schedule. Other methods
  fall back to static steps there (``adaptive_unsupported_reason``), so they keep the
  launches.
- **TensorRT-LLM** reads ``speculative_config.draft_len_schedule`` (a dict of batch size to
  draft length, ``llmapi/llm_args.py``), whose keys changed meaning in PR #10860 (main,
  2026-03-13): up to 1.2 a key is the *smallest* batch size of its draft length and the
  schedule must hold ``1``; from 1.3 a key is the *largest* batch size of its draft length
  (``{4: 4, 8: 2}``: 1-4 draft 4, 5-8 draft 2, above 8 none). In both the smallest key's
  length must equal ``max_draft_len`` and none may exceed it, so a schedule whose k is not
  largest at batch size 1 is refused for it.

The flags come from the engines' own adapters (:mod:`speedbench.engines.vllm`,
:mod:`speedbench.engines.sglang`), so a schedule uses the same spellings as a sweep, and the
contract tests check both with the engines' own code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speedbench.config import SpecConfig
from speedbench.engines.base import UnsupportedSpecError
from speedbench.engines.releases import Release, release_name

Ranges = Sequence[tuple[int, int, int]]
# SGLang's adaptive speculative config: the oldest release checked that has it, and the
# methods it adapts (others run static steps).
SGLANG_ADAPTIVE_SINCE: Release = (0, 5, 23)
SGLANG_ADAPTIVE_METHODS = ("eagle", "eagle3")
# Where the adaptive launch expects its config (written beside the schedule by ``tune``).
ADAPTIVE_CONFIG_FILE = "sglang-adaptive.json"
# TensorRT-LLM's draft_len_schedule keys are the largest batch size of each length from here
# (PR #10860), the smallest before.
TRTLLM_SCHEDULE_KEYS_ARE_UPPER: Release = (1, 3, 0)


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


def merged(ranges: Ranges) -> list[tuple[int, int, int]]:
    """The ranges with neighbours of one k joined: (1, 2, 3), (3, 4, 3) -> (1, 4, 3)."""
    check_ranges(ranges)
    out: list[tuple[int, int, int]] = []
    for first, last, k in ranges:
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], last, k)
        else:
            out.append((first, last, k))
    return out


def sglang_adaptive_config(ranges: Ranges) -> dict[str, dict[str, list[int]]]:
    """SGLang's ``--speculative-adaptive-config``: one tier per range, pinned to its k.

    A tier's key is its range's first batch size; batch sizes above the last range stay in
    the last tier.
    """
    return {str(first): {"candidate_steps": [k]} for first, _, k in merged(ranges)}


def trtllm_draft_len_schedule(ranges: Ranges, release: Release | None) -> dict[int, int]:
    """TensorRT-LLM's ``draft_len_schedule`` for ``release`` (empty: SD off at every size).

    From 1.3 a trailing range of k = 0 is left implicit (TensorRT-LLM drafts nothing above the
    largest key), and so is every batch size beyond the schedule's last range; up to 1.2 the
    last range's k holds beyond it.

    Raises:
        UnsupportedSpecError: The release is unknown, or the schedule's k at batch size 1 is
            not its largest (TensorRT-LLM ties the smallest key to ``max_draft_len``).
    """
    joined = merged(ranges)
    top = max(k for _, _, k in joined)
    if top == 0:
        return {}
    if release is None:
        raise UnsupportedSpecError(
            "TensorRT-LLM's release is unknown, and draft_len_schedule's keys are the smallest "
            "batch size of each draft length up to 1.2 and the largest from 1.3: name the "
            "release in the image tag (e.g. release:1.2.0)"
        )
    if joined[0][2] != top:
        raise UnsupportedSpecError(
            f"TensorRT-LLM {release_name(release)} needs draft_len_schedule's smallest batch "
            f"size to draft max_draft_len: this schedule drafts {joined[0][2]} at batch size 1 "
            f"and {top} at batch sizes {next(f'{a}-{b}' for a, b, k in joined if k == top)}"
        )
    if release < TRTLLM_SCHEDULE_KEYS_ARE_UPPER:
        return {first: k for first, _, k in joined}
    while joined[-1][2] == 0:
        joined.pop()
    return {last: k for _, last, k in joined}


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


def sglang_adaptive_launch(
    method: str,
    ranges: Ranges,
    release: Release | None,
    draft_model: str | None = None,
    config_path: str = ADAPTIVE_CONFIG_FILE,
) -> dict[str, Any] | None:
    """One SGLang server following the whole schedule, where the release and method allow.

    None where they do not (a release before 0.5.23, or a method SGLang does not adapt): the
    launches per range are then the schedule. ``--speculative-num-steps`` is the largest k,
    which SGLang's adaptive params start from where the first tier offers it.
    """
    from speedbench.engines.sglang import speculative_args

    if method not in SGLANG_ADAPTIVE_METHODS or release is None:
        return None
    if release < SGLANG_ADAPTIVE_SINCE:
        return None
    top = max(k for _, _, k in merged(ranges))
    if top == 0:
        return None
    spec = _spec(method, top, draft_model, None)
    args = [*speculative_args(spec, release), "--speculative-adaptive",
            "--speculative-adaptive-config", config_path]  # fmt: skip
    return {"args": args, "config_file": config_path, "config": sglang_adaptive_config(ranges)}


def trtllm_options(
    method: str,
    ranges: Ranges,
    release: Release | None,
    draft_model: str | None = None,
    ngram: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The schedule's part of TensorRT-LLM's ``--extra_llm_api_options`` YAML ({}: SD off)."""
    from speedbench.config import EngineConfig
    from speedbench.engines.trtllm import llm_api_options

    schedule = trtllm_draft_len_schedule(ranges, release)
    if not schedule:
        return {}
    spec = _spec(method, max(schedule.values()), draft_model, ngram)
    spec = spec.model_copy(update={"options": {**spec.options, "draft_len_schedule": schedule}})
    options = llm_api_options(EngineConfig(kind="trtllm", model="target"), spec, release)
    return {key: options[key] for key in ("speculative_config", "disable_overlap_scheduler")
            if key in options}  # fmt: skip


def engine_schedules(
    method: str,
    ranges: Ranges,
    draft_model: str | None = None,
    ngram: tuple[int, int] | None = None,
    sglang_image: str | None = None,
    trtllm_image: str | None = None,
) -> dict[str, Any]:
    """The schedule for every engine: vLLM's config, SGLang's launches, TensorRT-LLM's YAML.

    SGLang's flags and TensorRT-LLM's keys are those of the releases ``sglang_image`` and
    ``trtllm_image`` name (default: speedbench's pinned images), which the output records.
    Where SGLang's release and the method allow, one adaptive launch follows the whole
    schedule beside the launches per range; where TensorRT-LLM cannot express the schedule,
    its entry holds the reason instead of options.

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
    trt_image = trtllm_image or container_spec("trtllm").image
    trtllm: dict[str, Any] = {"image": trt_image}
    try:
        trtllm["llm_api_options"] = trtllm_options(
            method, ranges, image_release(trt_image), draft_model, ngram
        )
    except UnsupportedSpecError as exc:
        trtllm["unsupported"] = str(exc)
    sglang: dict[str, Any] = {"image": image, "launches": launches}
    adaptive = sglang_adaptive_launch(method, ranges, release, draft_model)
    if adaptive is not None:
        sglang["adaptive"] = adaptive
    return {
        "method": method,
        "ranges": [list(r) for r in ranges],
        "vllm": {
            "speculative_config": speculative_config(vllm_spec(method, ranges, draft_model, ngram))
        },
        "sglang": sglang,
        "trtllm": trtllm,
    }
