"""esgexp.analysis.variants: runs of one name told apart by the settings in which their configs differ."""

from esgexp.analysis.variants import differing_keys, variant_labels


def test_the_differing_settings_name_each_run():
    configs = {
        "a": {"dataset.limit": "3", "template.name": "esgenius", "template.text": "Q {query}", "paths.output_dir": "x"},
        "b": {
            "dataset.limit": "None",
            "template.name": "esgenius",
            "template.text": "Q {query}",
            "paths.output_dir": "y",
        },
        "c": {"dataset.limit": "None", "template.name": "short", "template.text": "{query}?", "paths.output_dir": "z"},
    }
    # template.text follows template.name (left out); paths never tell results apart.
    assert differing_keys(list(configs.values())) == ["dataset.limit", "template.name"]
    assert variant_labels(configs) == {
        "a": "limit=3, template=esgenius",
        "b": "limit=none, template=esgenius",
        "c": "limit=none, template=short",
    }


def test_a_base_url_names_runs_and_runtime_settings_do_not():
    """The speed settings the backend class declares (``runtime_keys``) and ``resume`` never name a variant."""
    served = {"backend._target_": "esgexp.backends.openai.OpenAIBackend"}
    configs = {
        "x": {
            **served,
            "backend.base_url": "http://127.0.0.1:8000/v1",
            "backend.max_concurrency": "4",
            "resume": "True",
        },
        "y": {
            **served,
            "backend.base_url": "http://127.0.0.1:9000/v1",
            "backend.max_concurrency": "8",
            "resume": "False",
        },
    }
    assert variant_labels(configs) == {
        "x": "base_url=http://127.0.0.1:8000/v1",
        "y": "base_url=http://127.0.0.1:9000/v1",
    }


def test_one_run_or_equal_configs_need_no_label():
    assert variant_labels({"a": {"seed": "1"}}) == {"a": ""}
    assert variant_labels({"a": {"seed": "1"}, "b": {"seed": "1"}}) == {"a": "", "b": ""}


def test_many_differences_are_counted_past_two():
    configs = {
        "a": {"dataset.limit": "3", "scoring.x": "1", "model.y": "1"},
        "b": {"dataset.limit": "4", "scoring.x": "2", "model.y": "2"},
    }
    assert variant_labels(configs)["a"] == "limit=3, x=1, +1 more"
