"""`medusa serve`'s /metrics read with the official Prometheus client's OpenMetrics parser: the
speculative decoding counters add up to the runs' own recorded steps."""

import json
import urllib.request

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families


@pytest.fixture(scope="module")
def base(serve):
    with serve() as (base, _printed):
        yield base


def post(base, path, body):
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as answer:
        return json.load(answer)


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=60) as answer:
        return answer.read().decode()


def families(base):
    return {f.name: f for f in text_string_to_metric_families(get(base, "/metrics"))}


def value(family, **labels):
    matching = [s.value for s in family.samples
                if all(s.labels.get(k) == v for k, v in labels.items())
                and s.name == family.name + "_total"]
    assert len(matching) == 1, (family, labels)
    return matching[0]


def test_spec_decode_counters_add_up_to_the_recorded_steps(base):
    prompts = ["one two three one two three one two", "red green blue red green blue red"]
    run_ids = [
        post(base, "/v1/completions", {
            "prompt": prompt, "max_tokens": 12, "temperature": 0, "mode": "lookup",
            # Drafts whenever lookup has a guess, whatever this machine's costs.
            "draft_length": 4,
        })["run_id"]
        for prompt in prompts
    ]
    post(base, "/v1/completions", {"prompt": "Hello", "max_tokens": 3, "temperature": 0})
    steps = [s for run in run_ids for s in json.loads(get(base, f"/api/runs/{run}"))["steps"]]
    drafting = [s for s in steps if s["tree_size"] > 0]
    assert drafting, "lookup drafted from the repeated prompt"

    metrics = families(base)
    spec = lambda name: value(metrics[f"medusa_spec_decode_{name}"], mode="lookup")
    assert spec("num_drafts") == len(drafting)
    assert spec("num_draft_tokens") == sum(s["tree_depth"] for s in drafting)
    assert spec("num_accepted_tokens") == sum(s["accepted_len"] - 1 for s in drafting)
    assert spec("num_tree_nodes") == sum(s["tree_size"] for s in drafting)
    per_pos = metrics["medusa_spec_decode_num_accepted_tokens_per_pos"]
    for position in range(max(len(s["depth_hits"]) for s in drafting)):
        hits = sum(1 for s in drafting
                   if position < len(s["depth_hits"]) and s["depth_hits"][position])
        assert value(per_pos, mode="lookup", position=str(position)) == hits
    assert sum(value(per_pos, mode="lookup", position=s.labels["position"])
               for s in per_pos.samples if s.labels["mode"] == "lookup") == spec("num_accepted_tokens")
    # Medusa has no heads here: its counters are there, at zero.
    assert value(metrics["medusa_spec_decode_num_drafts"], mode="medusa") == 0


def test_latency_histograms_count_finished_runs(base):
    post(base, "/v1/completions", {"prompt": "The sky is", "max_tokens": 4, "temperature": 0})
    metrics = families(base)
    finished = value(metrics["medusa_runs"], status="finished")
    for name in ("medusa_time_to_first_token_seconds", "medusa_time_per_output_token_seconds",
                 "medusa_e2e_request_latency_seconds"):
        family = metrics[name]
        assert family.type == "histogram"
        counts = {s.labels["mode"]: s.value for s in family.samples if s.name == name + "_count"}
        assert set(counts) == {"normal", "medusa", "lookup", "auto", "draft", "eagle"}
        if name != "medusa_time_per_output_token_seconds":
            assert sum(counts.values()) == finished
        buckets = [s.value for s in family.samples
                   if s.name == name + "_bucket" and s.labels["mode"] == "normal"]
        assert buckets == sorted(buckets) and buckets[-1] == counts["normal"]
    usage = metrics["medusa_kv_cache_usage_perc"].samples[0].value
    assert 0 < usage <= 1
    # The older names are still there.
    assert value(metrics["medusa_tokens_generated"]) > 0
