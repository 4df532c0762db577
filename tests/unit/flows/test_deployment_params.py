"""What a deployment run sends must pass the schema Prefect enforces on deployment parameters.

Served deployments enforce their parameter schema (Prefect's ``enforce_parameter_schema``
default), which is the sections' JSON schema: the flat names that params.yaml and the CLI
take are refused there. The README's ``prefect deployment run`` example and the pool's
dispatched forms are checked against it.
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from prefect.utilities.callables import parameter_schema

from flows.pool import measure_config
from flows.sweep import EMBEDDED_SWEEP, sweep
from speedbench import REPO_ROOT
from speedbench.config import ConfigError
from speedbench.run.plan import per_config_forms


def schema_of(flow) -> dict:
    return parameter_schema(flow.fn).model_dump_for_openapi()


def readme_params() -> dict:
    text = (REPO_ROOT / "README.md").read_text()
    match = re.search(r"prefect deployment run sweep/sweep \\\n\s*--params '(.*?)'", text, re.S)
    assert match, "the README's `prefect deployment run` example is gone"
    return json.loads(match.group(1))


def test_the_readme_example_passes_the_enforced_schema():
    jsonschema.validate(readme_params(), schema_of(sweep))


def test_flat_names_are_refused_by_the_deployment_schema():
    flat = {"config": {"name": "x", "batch_sizes": [1, 4]}}
    with pytest.raises(jsonschema.ValidationError, match="batch_sizes"):
        jsonschema.validate(flat, schema_of(sweep))


def test_the_default_form_and_every_dispatched_form_pass_it():
    jsonschema.validate({"config": json.loads(EMBEDDED_SWEEP.model_dump_json())}, schema_of(sweep))
    child = schema_of(measure_config)
    no_oracle = {
        "oracle": [],
        "oracle_per_category": None,
        "oracle_batch_size": None,
        "oracle_draft_vocab": [],
        "oracle_trees": [],
        "measure_best_k": False,
    }
    forms = per_config_forms(EMBEDDED_SWEEP.with_fields(**no_oracle))
    assert [label for label, _ in forms] == ["none", "draft_model-k3", "ngram-k3"]
    for _, form in forms:
        params = {"config": json.loads(form.model_dump_json()), "parent_run_id": "r"}
        jsonschema.validate(params, child)


def test_a_pool_sweep_refuses_the_oracle_in_one_line():
    with pytest.raises(ConfigError, match="a pool sweep measures without the acceptance oracle"):
        per_config_forms(EMBEDDED_SWEEP)
