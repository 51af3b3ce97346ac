"""The official OpenAI Python client against `medusa serve`, unchanged but for its base URL and
the server's API key."""

import openai
import pytest

API_KEY = "test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def base_url(serve):
    with serve(api_key=API_KEY) as (base, stdout):
        link = stdout.readline().strip()
        assert link == f"open the web UI at {base}/?token={API_KEY}", link
        yield f"{base}/v1"


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="module")
def model(client):
    """The served model's id, which requests must name (or leave out)."""
    return client.models.list().data[0].id


def test_a_client_without_the_key_is_refused(base_url):
    for key in ("not-needed", API_KEY + "x"):
        stranger = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as refused:
            stranger.models.list()
        assert refused.value.status_code == 401
        assert refused.value.body["code"] == "unauthorized"


def test_models_lists_the_loaded_model(client):
    models = client.models.list().data
    assert len(models) == 1 and models[0].id


def test_chat_completion(client):
    model = client.models.list().data[0].id
    answer = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=8, temperature=0, seed=1,
    )
    choice = answer.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
    # llama-server's timings, as clients written for it read them.
    timings = answer.model_extra["timings"]
    assert timings["predicted_n"] == answer.usage.completion_tokens
    assert timings["prompt_n"] + timings["cache_n"] == answer.usage.prompt_tokens
    assert timings["draft_n"] == 0 and timings["draft_n_accepted"] == 0


def test_streamed_chat_completion_with_usage(client, model):
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello"}],
        max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage.completion_tokens == 6
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].model_extra["timings"]["predicted_n"] == 6


def test_completion_in_lookup_mode(client, model):
    answer = client.completions.create(
        model=model, prompt="one two three one two three one", max_tokens=4, temperature=0,
        # A draft length drafts whenever lookup has a guess; the cost-aware default may not
        # on a busy machine.
        extra_body={"mode": "lookup", "draft_length": 4},
    )
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage.completion_tokens == 4
    timings = answer.model_extra["timings"]
    assert timings["draft_n"] > 0, timings
    assert 0 <= timings["draft_n_accepted"] <= timings["draft_n"]


def test_errors_raise_the_client_exceptions(client, model):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], n=2)
    assert err.value.code == "invalid_parameter"
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=model, prompt="word " * 1500, max_tokens=4, stream=True)
    assert err.value.code == "prompt_too_long"
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert err.value.code == "model_not_found"
