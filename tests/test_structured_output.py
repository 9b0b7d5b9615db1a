"""Structured output: a GenerationRequest's JSON Schema is part of its cache key, constrains hf decoding
(xgrammar, each row of a batch under its own schema) and goes to a real llama.cpp server as response_format."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from esgexp.backends.base import GenerationRequest, RunContext, request_payload, schema_text
from esgexp.backends.cache import cache_key
from esgexp.builders.schema import object_schema, question_schema, schema_problems
from esgexp.errors import UserError

SCHEMA = {
    "type": "object",
    "properties": {
        "year": {"type": "integer", "enum": [2022, 2023]},
        "unit": {"type": "string", "enum": ["tCO2e", "MWh"]},
    },
    "required": ["year", "unit"],
    "additionalProperties": False,
}
PROMPT = "Scope 1 emissions were 1,772.6 tCO2e in 2023. Give the year and the unit of the figure."


def test_a_schema_is_part_of_the_cache_key_and_no_schema_leaves_the_key_as_before():
    plain = GenerationRequest("a", PROMPT)
    assert "json_schema" not in request_payload(plain)  # keys made before structured output still hit
    shaped = GenerationRequest("a", PROMPT, json_schema=schema_text(SCHEMA))
    other = GenerationRequest("a", PROMPT, json_schema=schema_text({**SCHEMA, "required": ["year"]}))
    keys = {cache_key({"backend": "hf"}, PROMPT, r) for r in (plain, shaped, other)}
    assert len(keys) == 3
    assert (
        schema_text({"b": 1, "a": [2]}) == '{"b":1,"a":[2]}'
    )  # compact, properties in the order they are to be written


@pytest.mark.parametrize(
    "value, problems",
    [
        ({"year": 2023, "unit": "MWh"}, []),
        ({"year": 2023}, ["$: missing 'unit'"]),
        ({"year": "2023", "unit": "MWh"}, ["$.year: expected integer, got str"]),
        ({"year": True, "unit": "MWh"}, ["$.year: expected integer, got bool"]),
        ({"year": 2021, "unit": "MWh"}, ["$.year: 2021 is not one of the 2 allowed values"]),
        ({"year": 2023, "unit": "MWh", "x": 1}, ["$: unexpected key 'x'"]),
        ([1], ["$: expected object, got list"]),
    ],
)
def test_schema_problems_name_the_place(value, problems):
    assert schema_problems(value, SCHEMA) == problems


def test_schema_problems_for_strings_and_arrays():
    schema = {
        "type": "array",
        "minItems": 1,
        "maxItems": 2,
        "items": {"type": "string", "minLength": 2, "maxLength": 3},
    }
    assert schema_problems(["ab", "abc"], schema) == []
    assert schema_problems([], schema) == ["$: fewer than 1 items"]
    assert schema_problems(["a", "abcd"], schema) == [
        "$[0]: shorter than 2 characters",
        "$[1]: longer than 3 characters",
    ]


def test_schema_problems_for_alternatives_and_questions():
    fact = {
        "anyOf": [
            object_schema(
                evidence={"type": "string", "enum": ["Scope 1 was 5 t."]}, page={"type": "integer", "enum": [3]}
            ),
            object_schema(
                evidence={"type": "string", "enum": ["Scope 2 was 7 t."]}, page={"type": "integer", "enum": [4]}
            ),
        ]
    }
    assert schema_problems({"evidence": "Scope 2 was 7 t.", "page": 4}, fact) == []
    # each sentence only with its own page
    assert schema_problems({"evidence": "Scope 2 was 7 t.", "page": 3}, fact) == [
        "$: fits none of the 2 alternatives; closest: $.evidence: 'Scope 2 was 7 t.' is not one of the 1 allowed values"
    ]
    with pytest.raises(UserError, match=r"builder.max_question_chars: at least 10, got 9"):
        question_schema(9)
    question = question_schema(30)
    assert schema_problems("What were Scope 1 emissions?", question) == []
    for bad in (
        "what were Scope 1 emissions?",
        "What were they? In 2023?",
        "What were Scope 1 emissions",
        "Why?",
        "What were the Scope 1 emissions in 2023?",
        'What is "Scope 1"?',
        "What were\nthey?",
    ):
        assert schema_problems(bad, question), bad


def answers(backend, requests) -> dict[str, str]:
    out = {}
    backend.run(requests, lambda responses: out.update({r.id: r.output for r in responses if not r.failed}))
    return out


def test_hf_backend_decodes_json_that_fits_the_schema(make_cfg, tmp_path):
    """SmolLM2 on its own writes prose here; constrained by the schema, each of two batched prompts gives valid JSON."""
    from esgexp.backends.hf import HFBackend

    cfg = make_cfg()
    backend = HFBackend(cfg.model, RunContext(cfg.paths.cache_dir, "", 0), accelerator="cpu", progress_bar=False)
    schema = schema_text(SCHEMA)
    requests = [
        GenerationRequest(f"s{i}", p, max_new_tokens=24, json_schema=schema)
        for i, p in enumerate([PROMPT, "Energy use was 10 MWh in 2022. Give the year and the unit."])
    ]
    plain = answers(backend, [GenerationRequest("plain", PROMPT, max_new_tokens=12)])["plain"]
    shaped = answers(backend, requests)
    with pytest.raises(json.JSONDecodeError):
        json.loads(plain)
    for text in shaped.values():
        assert schema_problems(json.loads(text), SCHEMA) == []
        assert text.startswith('{"year": ') and "\n" not in text  # the schema's property order, no line breaks


def test_llama_server_honours_the_schema_as_response_format(llama_server, tmp_path):
    """llama-cpp-python's server (0.3.36) reads {"type": "json_object", "schema": ...}; OpenAI's json_schema form
    it refuses (HTTP 500, its request model allows only text and json_object), hence backend.response_format."""
    from esgexp.backends.openai import OpenAIBackend

    model = OmegaConf.create({"name": "smollm2-135m", "hub_id": None, "adapter": None})
    backend = OpenAIBackend(
        model, RunContext(str(tmp_path), "", 0), llama_server, response_format="json_object", progress_bar=False
    )
    requests = [GenerationRequest("s", PROMPT, max_new_tokens=32, json_schema=schema_text(SCHEMA))]
    text = answers(backend, requests)["s"]
    assert schema_problems(json.loads(text), SCHEMA) == []


def pick_schema(values: list[str]) -> dict:
    return {
        "type": "object",
        "properties": {"pick": {"type": "string", "enum": values}},
        "required": ["pick"],
        "additionalProperties": False,
    }


def test_hf_backend_batches_requests_whose_schemas_differ_each_row_under_its_own(tiny_cfg, monkeypatch):
    """One prompt, three disjoint enum schemas, one request without a schema: the three share one batch and
    each answer is valid under its own schema (the random model's logits are the same in every row, so only
    the row's grammar tells them apart); one at a time they are the same; the plain request runs apart, free."""
    from esgexp.backends.hf import HFBackend
    from esgexp.models.scoring import GenerateScorer

    batches = []
    real_call = GenerateScorer.__call__

    def counted(self, model, ids, input_ids, attention_mask):
        batches.append(sorted(ids))
        return real_call(self, model, ids, input_ids, attention_mask)

    monkeypatch.setattr(GenerateScorer, "__call__", counted)
    cfg = tiny_cfg()
    schemas = {
        f"s{i}": pick_schema(values) for i, values in enumerate([["red", "green"], ["cat", "dog"], ["north", "south"]])
    }
    requests = [
        GenerationRequest(item_id, PROMPT, max_new_tokens=32, json_schema=schema_text(s))
        for item_id, s in schemas.items()
    ]
    requests.append(GenerationRequest("plain", PROMPT, max_new_tokens=8))

    def run(batch_size: int) -> dict[str, str]:
        backend = HFBackend(
            cfg.model,
            RunContext(cfg.paths.cache_dir, "", 0),
            accelerator="cpu",
            batch_size=batch_size,
            progress_bar=False,
        )
        return answers(backend, requests)

    batched = run(batch_size=4)
    assert sorted(batches) == [["plain"], ["s0", "s1", "s2"]]
    for item_id, schema in schemas.items():
        assert schema_problems(json.loads(batched[item_id]), schema) == []
    with pytest.raises(json.JSONDecodeError):
        json.loads(batched["plain"])
    assert run(batch_size=1) == batched


@pytest.mark.parametrize(
    "raw, reason",
    [
        ('{"year": 2023, "unit": "MWh"}', None),
        ('{"year": 2023, "unit": "MW', "cut_off"),  # a string left open: the token budget ran out
        ('{"year": 2023,', "cut_off"),
        ('{"year": 2023} and more', "not_json"),
        ('{"year": 2023}', "schema"),
    ],
)
def test_an_output_is_parsed_or_named_cut_off_not_json_or_off_schema(raw, reason):
    from esgexp.backends.base import Response
    from esgexp.builders.generate import parse

    value, problem = parse(Response("a", output=raw), SCHEMA)
    assert (problem[0] if problem else None) == reason
    assert (value is None) == (reason is not None) and (problem is None or problem[2] == raw)
