"""The official OpenAI Python client against `medusa serve`, unchanged but for its base URL and
the server's API key."""

import json

import openai
import pydantic
import pytest

API_KEY = "test-key-0123456789abcdef"


@pytest.fixture(scope="module")
def base_url(serve):
    with serve(api_key=API_KEY) as (base, printed):
        assert printed == [f"open the web UI at {base}/?token={API_KEY}"], printed
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
        assert refused.value.code == "invalid_api_key"
        assert refused.value.body["type"] == "authentication_error"


def test_models_lists_the_loaded_model(client):
    models = client.models.list().data
    assert len(models) == 1 and models[0].id


def test_a_model_is_retrieved_by_its_id(client, model):
    card = client.models.retrieve(model)
    assert card.id == model and card.object == "model" and card.owned_by
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("no-such-model")
    assert missing.value.code == "model_not_found"
    assert missing.value.body["param"] == "model"


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
            model=model, messages=[{"role": "user", "content": "Hi"}], n=9)
    assert err.value.code == "invalid_parameter"
    assert err.value.param == "n"
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=model, prompt="word " * 1500, max_tokens=4, stream=True)
    assert err.value.code == "context_length_exceeded"
    assert err.value.param == "prompt"
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Hi"}], max_tokens=4)
    assert err.value.code == "model_not_found"
    assert err.value.param == "model"
    # OpenAI's range for the temperature is 0 to 2.
    for temperature in (5, -1):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                temperature=temperature)
        assert err.value.code == "invalid_parameter"
        assert err.value.param == "temperature"
        assert set(err.value.body) >= {"type", "code", "param", "message"}
    # A value of the wrong type names its field, in the client's words.
    for field, value in (("temperature", "hot"), ("max_tokens", -1)):
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Hi"}], **{field: value})
        assert err.value.code == "invalid_parameter"
        assert err.value.param == field, err.value.body
        assert "line 1" not in err.value.body["message"], err.value.body
    # Nothing to answer names the field that is empty.
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=model, messages=[], max_tokens=2)
    assert (err.value.code, err.value.param) == ("empty_prompt", "messages")
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model=model, input="")
    assert (err.value.code, err.value.param) == ("empty_prompt", "input")


def test_what_is_not_supported_yet_is_refused_by_name(client, model):
    hi = [{"role": "user", "content": "Hi"}]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=model, messages=hi, max_tokens=4,
            functions=[{"name": "f", "parameters": {"type": "object"}}])
    assert err.value.code == "unsupported_parameter"
    assert err.value.param == "functions"
    assert err.value.body["type"] == "invalid_request_error"
    # Asking for plain text is fine.
    answer = client.chat.completions.create(
        model=model, messages=hi, max_tokens=2, response_format={"type": "text"})
    assert answer.choices[0].message.content is not None


class Cat(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    name: str = pydantic.Field(max_length=20)
    age: int


@pytest.mark.parametrize("mode", ["normal", "lookup"])
def test_parse_with_a_pydantic_model(client, model, mode):
    completion = client.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "Give the name and age of a cat as JSON."}],
        response_format=Cat, max_tokens=160, temperature=0, extra_body={"mode": mode},
    )
    cat = completion.choices[0].message.parsed
    assert isinstance(cat, Cat), completion.choices[0].message.content
    assert cat.name


def test_json_mode_answers_a_json_object(client, model):
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Give the name and age of a cat as JSON."}],
        response_format={"type": "json_object"}, max_tokens=160, temperature=0,
    )
    assert isinstance(json.loads(answer.choices[0].message.content), dict)


def test_a_schema_the_converter_cannot_take_is_refused(client, model):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
            response_format={"type": "json_schema", "json_schema": {
                "name": "X", "schema": {"type": "string", "pattern": "[a-z]+"}}})
    assert err.value.code == "invalid_json_schema"
    assert err.value.param == "response_format"
    assert "must start with ^" in err.value.message


def test_logprobs_with_top_logprobs(client, model):
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello"}],
        max_tokens=5, temperature=0, logprobs=True, top_logprobs=2,
    )
    entries = answer.choices[0].logprobs.content
    assert len(entries) == answer.usage.completion_tokens
    assert "".join(e.token for e in entries) == answer.choices[0].message.content
    for entry in entries:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].token == entry.token  # greedy: the likeliest
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token


def test_streamed_logprobs_come_with_their_chunks(client, model):
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello"}],
        max_tokens=5, temperature=0, logprobs=True, top_logprobs=1, stream=True,
    )
    entries = [e for c in stream if c.choices and c.choices[0].logprobs
               for e in c.choices[0].logprobs.content]
    assert len(entries) == 5
    assert all(len(e.top_logprobs) == 1 for e in entries)


def test_n_choices_streamed_with_their_index(client, model):
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Tell me a story."}],
        max_tokens=6, temperature=1.0, seed=3, n=3, stream=True,
        stream_options={"include_usage": True},
    )
    texts, reasons, usage = {}, {}, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                reasons[choice.index] = choice.finish_reason
    assert sorted(texts) == [0, 1, 2]
    assert reasons == {0: "length", 1: "length", 2: "length"}
    assert usage.completion_tokens == 18
    assert len(set(texts.values())) > 1, texts


class GetWeather(pydantic.BaseModel):
    """Current weather in a city."""
    city: str = pydantic.Field(max_length=30)


def test_a_pydantic_tool_is_called_with_parsed_arguments(client, model):
    completion = client.chat.completions.parse(
        model=model, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[openai.pydantic_function_tool(GetWeather)], tool_choice="required",
        max_tokens=64, temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.function.name == "GetWeather"
    assert isinstance(call.function.parsed_arguments, GetWeather)


def test_a_streamed_tool_call_arrives_as_deltas(client, model):
    tools = [{"type": "function", "function": {
        "name": "get_time", "description": "The time now in a time zone",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}},
                       "required": ["zone"]}}}]
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
        tools=tools, tool_choice={"type": "function", "function": {"name": "get_time"}},
        max_tokens=64, temperature=0, stream=True,
    )
    calls, finish = {}, None
    for chunk in stream:
        choice = chunk.choices[0]
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"name": "", "arguments": ""})
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
        finish = choice.finish_reason or finish
    assert finish == "tool_calls"
    assert [call["name"] for call in calls.values()] == ["get_time"]
    assert isinstance(json.loads(calls[0]["arguments"])["zone"], str)


def test_responses_whole_and_streamed(client, model):
    whole = client.responses.create(
        model=model, instructions="Answer in one word.", input="Name a colour.",
        max_output_tokens=6, temperature=0)
    assert whole.status in ("completed", "incomplete")
    assert whole.output_text
    assert whole.usage.output_tokens >= 1
    deltas, last = [], None
    with client.responses.stream(
            model=model, instructions="Answer in one word.", input="Name a colour.",
            max_output_tokens=6, temperature=0) as stream:
        for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            last = event
    assert last.type in ("response.completed", "response.incomplete")
    assert "".join(deltas) == last.response.output_text == whole.output_text


def test_responses_parse_and_function_tools(client, model):
    parsed = client.responses.parse(
        model=model, input="Give the name and age of a cat as JSON.", text_format=Cat,
        max_output_tokens=160, temperature=0)
    assert isinstance(parsed.output_parsed, Cat)
    tools = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
              "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                             "required": ["city"], "additionalProperties": False},
              "strict": True}]
    called = client.responses.create(
        model=model, input="What is the weather in Paris?", tools=tools, tool_choice="required",
        max_output_tokens=64, temperature=0)
    (call,) = called.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert isinstance(json.loads(call.arguments)["city"], str)
    answer = client.responses.create(
        model=model, tools=tools, tool_choice="none", max_output_tokens=8, temperature=0,
        input=[{"role": "user", "content": "What is the weather in Paris?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name,
                "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}])
    assert answer.output[0].type == "message"
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model=model, input="Hi", previous_response_id=called.id)
    assert err.value.param == "previous_response_id"


def test_embeddings_in_base64_and_as_numbers_agree(client, model):
    texts = ["The cat sat on the mat.", "A cat was sitting on a rug.", "Stock markets fell sharply today."]
    # The SDK asks for base64 unless told otherwise, and decodes it.
    packed = client.embeddings.create(model=model, input=texts)
    numbers = client.embeddings.create(model=model, input=texts, encoding_format="float")
    assert [d.index for d in packed.data] == [0, 1, 2]
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))
    for a, b in zip(packed.data, numbers.data):
        assert len(a.embedding) == len(b.embedding)
        assert max(abs(x - y) for x, y in zip(a.embedding, b.embedding)) < 1e-6
        assert abs(dot(a.embedding, a.embedding) - 1) < 1e-4
    cat, rug, markets = (d.embedding for d in numbers.data)
    assert dot(cat, rug) > dot(cat, markets)
    assert packed.usage.prompt_tokens == packed.usage.total_tokens > 0
    # Token ids, as langchain's OpenAIEmbeddings sends them by default.
    ids = client.embeddings.create(model=model, input=[[1, 2, 3], [4, 5]])
    assert [len(d.embedding) for d in ids.data] == [len(cat)] * 2
    assert ids.usage.prompt_tokens == 5


# Texts and their ids in OpenAI's cl100k_base, as tiktoken writes them: what LangChain's
# OpenAIEmbeddings() sends with its default settings. The first's ids all lie within this
# model's vocabulary too; the second's do not.
CL100K_IDS = {
    "The cat sat on the mat.": [791, 8415, 7731, 389, 279, 5634, 13],
    "Photosynthesis turns sunlight into chemical energy.":
        [32872, 74767, 10800, 40120, 1139, 11742, 4907, 13],
}


def test_embeddings_of_openai_tokenizer_ids_are_those_of_their_text(client, model):
    texts = list(CL100K_IDS)
    as_text = client.embeddings.create(model=model, input=texts, encoding_format="float")
    as_ids = client.embeddings.create(
        model=model, input=[CL100K_IDS[t] for t in texts], encoding_format="float")
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))
    for text, by_text, by_ids in zip(texts, as_text.data, as_ids.data):
        assert dot(by_text.embedding, by_ids.embedding) >= 0.99, text
    # Read as the text, they count the model's own tokens of it.
    assert as_ids.usage.prompt_tokens == as_text.usage.prompt_tokens


def test_echo_scores_a_continuation_as_evaluation_harnesses_ask(client, model):
    context, continuation = "The capital of France is", " Paris"
    scored = client.completions.create(
        model=model, prompt=context + continuation, max_tokens=0, echo=True, logprobs=1)
    choice = scored.choices[0]
    assert choice.text == context + continuation
    lists = choice.logprobs
    assert "".join(lists.tokens) == context + continuation
    assert lists.token_logprobs[0] is None
    # The continuation's tokens are those whose text starts at or after the context's end.
    tail = [i for i, offset in enumerate(lists.text_offset) if offset >= len(context)]
    assert "".join(lists.tokens[i] for i in tail) == continuation
    loglikelihood = sum(lists.token_logprobs[i] for i in tail)
    assert loglikelihood < 0
    greedy = all(max(lists.top_logprobs[i], key=lists.top_logprobs[i].get) == lists.tokens[i] for i in tail)
    generated = client.completions.create(model=model, prompt=context, max_tokens=1, temperature=0)
    assert greedy == (generated.choices[0].text == lists.tokens[tail[0]])


def test_a_chat_tool_round_trip_call_result_answer(client, model):
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                       "required": ["city"]}}}]
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = client.chat.completions.create(
        model=model, messages=messages, tools=tools, tool_choice="required", max_tokens=64, temperature=0)
    message = called.choices[0].message
    (call,) = message.tool_calls
    assert called.choices[0].finish_reason == "tool_calls"
    messages += [message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "18 degrees and sunny"}]
    answer = client.chat.completions.create(
        model=model, messages=messages, tools=tools, tool_choice="none", max_tokens=16, temperature=0)
    assert answer.choices[0].message.tool_calls is None
    assert answer.choices[0].message.content
