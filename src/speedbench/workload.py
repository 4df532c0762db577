"""What a level sends and how: the prompts (:class:`WorkItem`) and the settings of its load.

Types only, so that the runner, the flow's tasks and the metrics read them without importing
the load generator (:mod:`speedbench.client.loadgen`), which drives them. The sweep form's
``protocol``, ``load`` and ``host_policy`` sections become one :class:`LoadSettings` in one
place, :func:`speedbench.run.plan.load_settings` (the form's ``output_len`` is ``max_tokens``,
the requests' own name; ``stop_at_eos`` is ``not ignore_eos``; ``client_workers`` is
``workers``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from speedbench.config import ArrivalProcess


@dataclass(frozen=True)
class WorkItem:
    """One prompt to send: text turns (templated here) or ready token IDs (single turn).

    Attributes:
        prompt_id: Stable id of the prompt (the split's question_id).
        category: Category or bucket/tier label used for grouping.
        user_turns: User turns, templated with the target's tokenizer one by one.
        prompt_ids: Pre-tokenized single-turn prompt; takes precedence over ``user_turns``.
        split_turns: How many turns the prompt has in its split (0: as many as sent), so a
            level can say which questions it measured on fewer turns than SPEED-Bench does.
        sub_category, source, difficulty: The split's own labels of the prompt, kept in its
            records (SPEED-Bench's columns of the same names).
    """

    prompt_id: str
    category: str = ""
    user_turns: tuple[str, ...] = ()
    prompt_ids: tuple[int, ...] | None = None
    split_turns: int = 0
    sub_category: str = ""
    source: str = ""
    difficulty: str = ""

    @property
    def on_fewer_turns(self) -> bool:
        """Whether fewer turns are sent than the split's question has."""
        return self.split_turns > self.num_turns

    @property
    def num_turns(self) -> int:
        """Requests this item produces."""
        return 1 if self.prompt_ids is not None else len(self.user_turns)


@dataclass
class LoadSettings:
    """How to drive one load level."""

    batch_size: int = 1
    max_tokens: int = 96
    temperature: float = 0.0
    seed: int | None = 0
    ignore_eos: bool = True
    request_timeout_s: float = 1800.0
    split: str = ""
    repeat: int = 0
    show_progress: bool = True
    workers: int = 0
    max_429_retries: int = 5
    contention_threshold: float = 0.10
    strict_host: bool = False
    # Open loop: conversations arrive at this mean rate (requests/s) instead of N streams.
    request_rate: float | None = None
    arrival: ArrivalProcess = "poisson"
    burstiness: float = 1.0
    max_concurrency: int | None = None
    # Requests sent first at this same load shape and left out of the metrics; ``warmup`` marks
    # the run that sends them.
    warmup_requests: int = 0
    warmup: bool = False
    # Measurements of the level (``repeat`` is the one being run).
    repeats: int = 1
    # How the grid point's configs share time (speedbench.run.interleave): off, resident, relaunch.
    interleave: str = "off"
    # Goodput's latency objectives by name (ttft_s, tpot_s, e2e_s); empty: no goodput.
    objectives: dict[str, float] = field(default_factory=dict)

    @property
    def open_loop(self) -> bool:
        """Whether requests arrive on a schedule rather than when a stream frees up."""
        return self.request_rate is not None
