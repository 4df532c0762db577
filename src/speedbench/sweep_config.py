"""The sweep form: what to measure (models, SD grid, oracle) and six sections of how.

:class:`SweepConfig` is the parameter of the ``sweep`` flow, so the Prefect UI renders it as a
form with one group per section: ``engine`` (which server, where), ``prompts`` (which splits and
how many questions), ``protocol`` (how each request generates), ``load`` (closed and open-loop
levels, warm-up, repeats, objectives), ``host_policy`` (what to do when the host is shared) and
``output`` (where records and runs go).

params.yaml, config files and the CLI keep one flat name per field (``batch_sizes``,
``engine: vllm``, ``out_dir``): :data:`FLAT_FIELDS` maps each to its section, and the form
accepts flat names, sections, or both (a field given twice is an error). :meth:`SweepConfig.flat`
is the inverse, for MLflow's parameters and anything else keyed by those names.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator
from pydantic.fields import FieldInfo

from speedbench.config import (
    EAGLE_METHODS,
    METHODS_NEEDING_DRAFT_MODEL,
    TREE_SHAPE,
    ArrivalProcess,
    EngineSettings,
    Interleave,
    SpecConfig,
    SpecMethod,
    SplitName,
    StrictModel,
)
from speedbench.data.speed_bench import config_of_path, split_name


class PromptsSection(StrictModel):
    """Which prompts each level sends."""

    splits: list[SplitName] = Field(
        default=["qualitative"], min_length=1, description="Splits to run."
    )
    prompt_file: str | None = Field(
        default=None,
        description="Your own JSONL or Parquet prompt set (or a folder of Parquet shards), "
        "measured as a split named after the file (instead of splits). SPEED-Bench's files in "
        "any of its layouts are recognised: <config>.jsonl (NeMo-Skills, vLLM bench serve), "
        "<config>/test.parquet (specdec_bench), <config>/*.parquet (the hub's files), measured "
        "as split speed_bench_<config>.",
    )
    speed_bench_dir: str | None = Field(
        default=None,
        description="Where the speed_bench_<config> splits are read: a folder holding "
        "<config>.jsonl (NeMo-Skills' prepare.py), speed/<config>/test.parquet (specdec_bench's "
        "prepare_data.py) or <config>/*.parquet (the hub's files). Unset: the hub (network).",
    )
    skip_placeholders: bool = Field(
        default=False,
        description="Measure SPEED-Bench without its placeholder rows (sources that must be "
        "fetched with specdec_bench's prepare step) instead of refusing; the count is recorded.",
    )
    categories: list[str] | None = Field(
        default=None, description="Only these categories of each split (None: all)."
    )
    per_category: int | None = Field(
        default=None, ge=1, description="Use the first N prompts of each category (None: all)."
    )
    per_category_by_batch_size: dict[int, int] = Field(
        default={},
        description="Closed loop: batch size -> prompts per category at that batch size "
        "(others use per_category). More questions where batching makes them cheap: "
        "{16: 5} (on the command line 16=5) puts the per-category acceptance of the bs-16 levels "
        "on 5 questions each.",
    )
    limit: int | None = Field(default=None, ge=1, description="At most N prompts per split.")
    multiturn: bool = Field(default=False, description="Send every turn of multi-turn prompts.")
    data_dir: str = Field(default="data", description="Where the built splits are.")

    @model_validator(mode="after")
    def _check_prompts(self) -> PromptsSection:
        # By value, so that a dumped form validates again: the default splits and a prompt file.
        if self.prompt_file is not None and self.splits != ["qualitative"]:
            raise ValueError("give splits or prompt_file, not both")
        if len(set(self.splits)) != len(self.splits):
            raise ValueError(f"splits has duplicates: {self.splits}")
        bad = {bs: n for bs, n in self.per_category_by_batch_size.items() if n < 1}
        if bad:
            raise ValueError(
                f"per_category_by_batch_size: prompts per category must be >= 1, got {bad}"
            )
        return self

    def per_category_at(self, batch_size: int, request_rate: float | None = None) -> int | None:
        """Prompts per category at one load point (None: all); open-loop levels use per_category."""
        if request_rate is not None:
            return self.per_category
        return self.per_category_by_batch_size.get(batch_size, self.per_category)

    @property
    def split_names(self) -> list[str]:
        """The splits measured: ``splits``, or the prompt file's (SPEED-Bench's: by config)."""
        if not self.prompt_file:
            return list(self.splits)
        config = config_of_path(self.prompt_file)
        return [split_name(config) if config else Path(self.prompt_file).stem]


class ProtocolSection(StrictModel):
    """How every request generates: the part of a number's definition the engine sees."""

    output_len: int = Field(
        default=96, ge=1, le=65536, description="Tokens generated a request (the cap, at EOS)."
    )
    stop_at_eos: bool = Field(
        default=False,
        description="SPEED-Bench's protocol: a request ends when the model ends its answer (EOS), "
        "up to output_len tokens. Off: ignore_eos, every request exactly output_len tokens, as "
        "serving benchmarks do.",
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0, description="Sampling temperature.")
    seed: int | None = Field(
        default=0,
        description="Seed for each request's sampling and the prompt order (null: requests "
        "sample unseeded, not reproducible).",
    )
    request_timeout_s: float = Field(
        default=1800.0, gt=0, description="Limit on one request, first byte to finish."
    )


class LoadSection(StrictModel):
    """The load levels: closed-loop batch sizes, open-loop rates, and how each is driven."""

    batch_sizes: list[int] = Field(
        default=[1],
        description="Closed loop: concurrent streams to sweep, each stream sending its next "
        "request when its last one ends (SPEED-Bench's batch-size axis).",
    )
    request_rates: list[float] = Field(
        default=[],
        description="Open loop: request rates (requests/s) to sweep; requests arrive on a "
        "seeded schedule whatever the server answers, and latency counts from the due time.",
    )
    rate_sweep: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Open loop, as GuideLLM's sweep: this many rates evenly spaced strictly "
        "between the baseline's request throughput at the smallest and at the largest batch "
        "size (needs the baseline and two batch sizes), per split.",
    )
    arrival: ArrivalProcess = Field(
        default="poisson",
        description="Open loop: how arrivals are spaced (poisson; gamma with burstiness; "
        "constant gaps).",
    )
    burstiness: float = Field(
        default=1.0,
        gt=0,
        description="Open loop, gamma arrivals: the shape; < 1 burstier than Poisson, > 1 "
        "more even (1 is Poisson).",
    )
    max_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Open loop: at most this many requests in flight; a request that waits "
        "for a slot counts the wait in its latency. None: no cap.",
    )
    warmup_requests: int = Field(
        default=0,
        ge=0,
        description="Requests sent before each level at the level's own load shape, kept in "
        "the records (marked warmup) and left out of every metric.",
    )
    repeats: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Measure each level this many times (same prompts, a fresh order and "
        "arrival schedule per repeat); metrics get a confidence interval across repeats.",
    )
    interleave: Interleave = Field(
        default="off",
        description="How the configs of one grid point (the no-SD baseline and the SD configs "
        "at a split and batch size) share the host's time. off: each config's levels back to "
        "back, one launch each (a drifting host lands in every speedup). resident: every "
        "config's engine up at once, their repeats alternating in a seeded random order per "
        "round, so drift hits both sides of every ratio (repeats >= 2); where not all fit the "
        "host's memory, the baseline stays up and the SD configs take turns in one slot, one "
        "swap per round. relaunch: the same alternation with one launch per block, for engines "
        "that do not fit together (one GPU).",
    )
    client_workers: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Load-generator processes; 0 picks one per 256 streams, leaving a core free.",
    )
    slo_ttft_s: float | None = Field(
        default=None, gt=0, description="Goodput objective: time to first token (s)."
    )
    slo_tpot_s: float | None = Field(
        default=None, gt=0, description="Goodput objective: time per output token (s)."
    )
    slo_e2e_s: float | None = Field(
        default=None, gt=0, description="Goodput objective: end-to-end latency (s)."
    )

    @field_validator("interleave", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        # YAML 1.1 reads a bare `off` as false.
        return "off" if value is False else value

    @model_validator(mode="after")
    def _check_load_shape(self) -> LoadSection:
        sizes = self.batch_sizes
        if bad_sizes := [v for v in sizes if v < 1]:
            raise ValueError(f"batch_sizes must all be >= 1, got {bad_sizes}")
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"batch_sizes has duplicates: {sizes}")
        rates = self.request_rates
        if bad_rates := [r for r in rates if not 0 < r < float("inf")]:
            raise ValueError(
                f"request_rates must all be finite and > 0 requests/s, got {bad_rates}"
            )
        if len(set(rates)) != len(rates):
            raise ValueError(f"request_rates has duplicates: {rates}")
        if not (sizes or rates or self.rate_sweep):
            raise ValueError("no load level: give batch_sizes, request_rates or rate_sweep")
        if not self.open_loop:
            # By value, not by what was given: the Prefect form and a dumped config send every
            # field, defaults included.
            defaults = {"max_concurrency": None, "arrival": "poisson", "burstiness": 1.0}
            set_here = [name for name, value in defaults.items() if getattr(self, name) != value]
            if set_here:
                raise ValueError(
                    f"{', '.join(set_here)} apply to open-loop levels only; give "
                    "request_rates or rate_sweep"
                )
        if self.open_loop and self.client_workers > 1:
            raise ValueError(
                "an open-loop level runs in one client process (its schedule is one clock's): "
                f"client_workers must be 0 or 1, got {self.client_workers}"
            )
        if self.interleave != "off" and self.repeats < 2:
            raise ValueError(
                f"interleave {self.interleave} alternates the configs' repeats: set repeats "
                f">= 2 (got {self.repeats})"
            )
        if self.interleave != "off" and self.open_loop:
            raise ValueError(
                f"interleave {self.interleave} pairs closed-loop levels only; drop "
                "request_rates and rate_sweep, or set interleave: off"
            )
        if self.burstiness != 1.0 and self.arrival != "gamma":
            raise ValueError(f"burstiness applies to gamma arrivals only, not {self.arrival}")
        return self

    @property
    def open_loop(self) -> bool:
        """Whether any level is open-loop (request rates, given or swept)."""
        return bool(self.request_rates or self.rate_sweep)

    @property
    def objectives(self) -> dict[str, float]:
        """The goodput objectives that are set, by name (``ttft_s``, ``tpot_s``, ``e2e_s``)."""
        slos = {"ttft_s": self.slo_ttft_s, "tpot_s": self.slo_tpot_s, "e2e_s": self.slo_e2e_s}
        return {name: bound for name, bound in slos.items() if bound is not None}


class HostPolicySection(StrictModel):
    """What a level does about other processes on the host."""

    contention_threshold: float = Field(
        default=0.10,
        gt=0,
        le=1,
        description="Flag a level when other processes used more than this fraction of the "
        "host's cores during it.",
    )
    strict_host: bool = Field(
        default=False,
        description="Refuse to measure a level while other processes use the host (a 2 s probe "
        "before each level) instead of flagging it afterwards.",
    )


class OutputSection(StrictModel):
    """Where records, plots and MLflow runs go."""

    out_dir: str = Field(default="results/sweeps", description="Where records and plots go.")
    tracking_uri: str | None = Field(
        default=None,
        description="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else a SQLite file in "
        "the project).",
    )
    experiment: str = Field(default="speedbench", description="MLflow experiment name.")
    force: bool = Field(default=False, description="Re-run configurations that already completed.")


SECTIONS: dict[str, type[StrictModel]] = {
    "engine": EngineSettings,
    "prompts": PromptsSection,
    "protocol": ProtocolSection,
    "load": LoadSection,
    "host_policy": HostPolicySection,
    "output": OutputSection,
}
# The one flat name that is not its field's: `engine: vllm` is engine.kind.
_FLAT_NAME = {("engine", "kind"): "engine"}
# flat name -> (section, field), for every sectioned field.
FLAT_FIELDS: dict[str, tuple[str, str]] = {
    _FLAT_NAME.get((section, field), field): (section, field)
    for section, model in SECTIONS.items()
    for field in model.model_fields
}


class SweepConfig(StrictModel):
    """A sweep: SD methods x draft lengths x load levels x splits on one target model.

    This is the parameter form of the ``sweep`` flow; every field shows in the Prefect UI with
    its description, grouped by section. One engine is launched per SD configuration and reused
    for all load levels and splits; a no-SD baseline is measured too (unless ``baseline`` is
    false) so that speedup is defined.
    """

    name: str = Field(default="sweep", min_length=1, description="Name of the MLflow parent run.")
    model: str = Field(
        default="qwen2.5-coder-1.5b-instruct",
        description="Target: a packaged model name, a local HF directory or a hub id.",
    )
    draft_model: str | None = Field(
        default=None, description="Draft weights for draft_model/eagle/eagle3 (name, path or id)."
    )
    eagle_heads: dict[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")],
                      str] = Field(
        default={},
        description="EAGLE / EAGLE-3 heads by name (a local folder or hub id each): every eagle "
        "and eagle3 method is measured with each head, labelled eagle3-<name>-k<k>. Unset: "
        "those methods draft with draft_model.",
    )  # fmt: skip
    tokenizer: str | None = Field(
        default=None,
        description="The target's tokenizer on this machine, which tokenizes every prompt: a "
        "packaged name, local folder or hub id; unset: the model's own (set it when the model "
        "is a path on the engine's host only).",
    )
    methods: list[SpecMethod] = Field(
        default=["none"], min_length=1, description="SD methods to measure."
    )
    draft_lengths: list[int] = Field(
        default=[], description="Draft lengths k to sweep for every SD method."
    )
    baseline: bool = Field(
        default=True,
        description="Measure the no-SD baseline too (one more engine launch): speedup and the "
        "lossless check need it. Off for an acceptance-only sweep.",
    )
    draft_cost: bool = Field(
        default=False,
        description="Also time the draft model alone (no SD) at every batch size, so the report "
        "can show the break-even model: expected speedup AL / (1 + k c) beside the measured one.",
    )
    oracle: list[Literal["draft_model", "ngram"]] = Field(
        default=[],
        description="Greedy acceptance oracle: replay a baseline level's answers under these "
        "drafters (draft_model: one teacher-forced pass of draft_model; ngram: vLLM's prompt "
        "lookup) and predict acceptance for every k = 1..oracle_max_k, per category, with no "
        "engine run per k. Greedy sweeps (temperature 0) only.",
    )
    oracle_max_k: int = Field(
        default=6, ge=1, le=16, description="Oracle: predict draft lengths 1..oracle_max_k."
    )
    oracle_per_category: int | None = Field(
        default=None,
        ge=1,
        description="Oracle: measure its own baseline level (one more launch of the target, no "
        "SD) on this many prompts per category at oracle_batch_size, so its per-category "
        "figures rest on more questions than the SD levels; unset: replay the sweep's own "
        "baseline levels.",
    )
    oracle_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="Oracle: the batch size of its own baseline level (default: the largest "
        "of batch_sizes).",
    )
    oracle_draft_vocab: list[Annotated[int, Field(ge=1)]] = Field(
        default=[],
        description="Oracle: also predict the draft restricted to its N most frequent tokens "
        "(counted over the throughput corpora, never the answers), for each N here: AL by k "
        "and category, and the share of answer tokens kept (SPEED-Bench's vocabulary pruning).",
    )
    oracle_trees: list[Annotated[str, StringConstraints(pattern=TREE_SHAPE)]] = Field(
        default=[],
        description="Oracle: also predict static draft trees, breadth per depth like 4x4x4 "
        "(the draft's top-4 children of every node, depth 3): AL and tokens verified per step.",
    )
    speedup_model: bool = Field(
        default=True,
        description="Oracle: fit the speedup model (step costs from the no-SD levels, every k "
        "priced at every batch size, a schedule per drafter). Off where the levels cannot time "
        "a prefill: one request a level, whose first burst has no earlier one to time it from.",
    )
    measure_best_k: bool = Field(
        default=False,
        description="Oracle: after the speedup model, measure each drafter at its predicted "
        "best k at every batch size where that k is not in draft_lengths (one launch per k), "
        "and judge the recommendation against the grid's k in the report.",
    )
    engine: EngineSettings = Field(
        default_factory=EngineSettings, description="Which engine serves the target, and where."
    )
    prompts: PromptsSection = Field(
        default_factory=PromptsSection, description="Which prompts each level sends."
    )
    protocol: ProtocolSection = Field(
        default_factory=ProtocolSection, description="How every request generates."
    )
    load: LoadSection = Field(
        default_factory=LoadSection,
        description="Load levels (batch sizes, request rates), warm-up, repeats, objectives.",
    )
    host_policy: HostPolicySection = Field(
        default_factory=HostPolicySection,
        description="What a level does about other processes on the host.",
    )
    output: OutputSection = Field(
        default_factory=OutputSection, description="Where records, plots and MLflow runs go."
    )

    @model_validator(mode="before")
    @classmethod
    def _route_flat_names(cls, data: Any) -> Any:
        return cls.nest(data) if isinstance(data, dict) else data

    @classmethod
    def nest(cls, data: dict[str, Any]) -> dict[str, Any]:
        """The form's fields with each flat name (``batch_sizes``) put in its section (``load``).

        Raises:
            ValueError: A field is given twice, by its flat name and in its section.
        """
        routed: dict[str, Any] = {}
        sections: dict[str, dict[str, Any]] = {}
        for key, value in data.items():
            # `engine: vllm` is the flat engine.kind; `engine: {...}` is the section.
            if key in SECTIONS and not (key == "engine" and isinstance(value, str)):
                if isinstance(value, StrictModel):
                    value = value.model_dump(exclude_unset=True)
                if not isinstance(value, dict):
                    routed[key] = value  # the section's own validation names what is wrong
                    continue
                given = sections.setdefault(key, {})
                for field, field_value in value.items():
                    if field in given:
                        raise ValueError(f"{field} given twice: flat and in section {key}")
                    given[field] = field_value
            elif key in FLAT_FIELDS:
                section, field = FLAT_FIELDS[key]
                given = sections.setdefault(section, {})
                if field in given:
                    raise ValueError(f"{key} given twice: flat and in section {section}")
                given[field] = value
            else:
                routed[key] = value
        return {**sections, **routed}

    @classmethod
    def flat_fields(cls) -> dict[str, FieldInfo]:
        """Every field by its flat name (params.yaml's and the CLI's), sections flattened."""
        top = {name: info for name, info in cls.model_fields.items() if name not in SECTIONS}
        nested = {
            flat: SECTIONS[section].model_fields[field]
            for flat, (section, field) in FLAT_FIELDS.items()
        }
        return top | nested

    @classmethod
    def section_of(cls, flat_name: str) -> str | None:
        """The section a flat name belongs to (None: a top-level field)."""
        return FLAT_FIELDS[flat_name][0] if flat_name in FLAT_FIELDS else None

    def flat(self) -> dict[str, Any]:
        """The form by flat names (JSON-safe values): what params.yaml or the CLI would say."""
        dumped = self.model_dump(mode="json")
        top = {name: value for name, value in dumped.items() if name not in SECTIONS}
        nested = {flat: dumped[section][field] for flat, (section, field) in FLAT_FIELDS.items()}
        return top | nested

    @classmethod
    def with_defaults(cls, defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
        """``given`` over ``defaults``, field by field (either may use flat names or sections)."""
        merged = cls.nest(defaults)
        for key, value in cls.nest(given).items():
            base = merged.get(key)
            if isinstance(base, dict) and isinstance(value, dict):
                value = {**base, **value}
            merged[key] = value
        return merged

    def with_fields(self, **flat: Any) -> SweepConfig:
        """A validated copy with some fields changed, by flat name (``force=True``)."""
        return SweepConfig.model_validate(self.flat() | flat)

    @model_validator(mode="after")
    def _check_grid(self) -> SweepConfig:
        if bad := [k for k in self.draft_lengths if k < 1]:
            raise ValueError(f"draft_lengths must all be >= 1, got {bad}")
        for name in ("draft_lengths", "methods"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} has duplicates: {values}")
        load = self.load
        if load.rate_sweep and (len(load.batch_sizes) < 2 or not self.baseline):
            raise ValueError(
                "rate_sweep places rates between the baseline's throughput at the smallest and "
                "the largest batch size: it needs the baseline and at least two batch_sizes"
            )
        extra = sorted(set(self.prompts.per_category_by_batch_size) - set(load.batch_sizes))
        if extra:
            raise ValueError(
                f"per_category_by_batch_size names batch sizes {extra} that batch_sizes "
                f"{load.batch_sizes} does not sweep"
            )
        speculative = [m for m in self.methods if m != "none"]
        if not self.baseline and ("none" in self.methods or not speculative):
            raise ValueError(
                "baseline is false but methods include none (or only none): measure the "
                "baseline, or list SD methods only"
            )
        if not speculative and self.draft_lengths:
            raise ValueError(
                f"draft_lengths {self.draft_lengths} given but no SD method is selected; "
                "add a method or drop draft_lengths"
            )
        if speculative and not self.draft_lengths:
            raise ValueError(f"draft_lengths is required for SD methods {speculative}")
        self._check_oracle()
        needing = [m for m in self.methods if m in METHODS_NEEDING_DRAFT_MODEL]
        if self.eagle_heads:
            if not set(needing) & EAGLE_METHODS:
                raise ValueError("eagle_heads given but methods has no eagle or eagle3")
            needing = [m for m in needing if m not in EAGLE_METHODS]
        if needing and not self.draft_model:
            raise ValueError(f"draft_model is required for methods {needing}")
        return self

    def _check_oracle(self) -> None:
        if not self.oracle:
            if self.oracle_per_category is not None or self.oracle_batch_size is not None:
                raise ValueError("oracle_per_category/oracle_batch_size set but oracle is empty")
            if self.measure_best_k:
                raise ValueError("measure_best_k measures the oracle's recommendation: set oracle")
            if self.oracle_draft_vocab or self.oracle_trees:
                raise ValueError("oracle_draft_vocab/oracle_trees set but oracle is empty")
            return
        if self.measure_best_k and not self.speedup_model:
            raise ValueError("measure_best_k measures the speedup model's pick: set speedup_model")
        if len(set(self.oracle)) != len(self.oracle):
            raise ValueError(f"oracle has duplicates: {self.oracle}")
        if self.protocol.temperature != 0:
            raise ValueError(
                f"the oracle predicts greedy SD only; temperature is {self.protocol.temperature}"
            )
        if not self.baseline:
            raise ValueError("the oracle replays the no-SD baseline: baseline must be true")
        if "draft_model" in self.oracle and not self.draft_model:
            raise ValueError("oracle draft_model needs draft_model (the draft's weights)")
        if (self.oracle_draft_vocab or self.oracle_trees) and "draft_model" not in self.oracle:
            raise ValueError("oracle_draft_vocab and oracle_trees are the draft's: add draft_model")
        if not self.load.batch_sizes and self.oracle_per_category is None:
            raise ValueError(
                "the oracle replays a closed-loop baseline level: give batch_sizes or "
                "oracle_per_category"
            )

    @property
    def selected_per_category(self) -> int | None:
        """Prompts per category the sweep loads: the most any of its levels uses (None: all)."""
        prompts = self.prompts
        if prompts.per_category is None:
            return None
        oracle = [self.oracle_per_category] if self.oracle and self.oracle_per_category else []
        return max([prompts.per_category, *prompts.per_category_by_batch_size.values(), *oracle])

    def spec_configs(self) -> list[SpecConfig]:
        """Expand methods x draft lengths into SpecConfigs; 'none' appears once.

        The no-SD baseline comes first, whether or not ``methods`` lists it, so every SD point
        has a speedup; ``baseline: false`` leaves it out.
        """
        specs = [SpecConfig()] if self.baseline else []
        for method, k in itertools.product(self.methods, self.draft_lengths):
            if method == "none":
                continue
            if method in EAGLE_METHODS and self.eagle_heads:
                specs += [
                    SpecConfig(
                        method=method, num_speculative_tokens=k, draft_model=path, variant=name
                    )
                    for name, path in self.eagle_heads.items()
                ]
                continue
            draft = self.draft_model if method in METHODS_NEEDING_DRAFT_MODEL else None
            specs.append(SpecConfig(method=method, num_speculative_tokens=k, draft_model=draft))
        return specs
