"""The OpenAI front as pure functions: parsing and checking bodies the way vLLM's server does,
its error bodies, the token count of text, and the response bodies and SSE chunks.
Needs no optional dependency."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.serve.openai_api import (
    Bootstrap,
    ChatMessage,
    Endpoint,
    ServedModel,
    count_text_tokens,
    parse,
    parse_chat,
    parse_completion,
    render_chat,
    text_token_ids,
)
from dmocker.serve.openai_errors import (
    ApiError,
    ErrorKind,
    ErrorStyle,
)
from dmocker.serve.openai_responses import (
    DONE,
    TOKEN_TEXT,
    Choice,
    FinishReason,
    Usage,
    chat_response,
    completion_response,
    generated_text,
    models_response,
    response_id,
    stream_tokens,
)

SERVED = ServedModel(("mock-model", "alias"), max_model_len=4096)


def body(**fields: object) -> bytes:
    return orjson.dumps(fields)


def refused(raw: bytes, endpoint: Endpoint = Endpoint.COMPLETIONS, served: ServedModel = SERVED) -> ApiError:
    with pytest.raises(ApiError) as info:
        parse(endpoint, raw, served)
    return info.value


# -- parsing ---------------------------------------------------------------------------------------

def test_a_text_completion_takes_vllm_defaults() -> None:
    r = parse_completion(body(model="mock-model", prompt="Hello world"), SERVED)
    assert r.endpoint is Endpoint.COMPLETIONS
    assert r.model == "mock-model"
    assert r.max_tokens == 16  # CompletionRequest.max_tokens default
    assert r.min_tokens == 0 and not r.ignore_eos and not r.stream and not r.include_usage
    assert r.prompts[0].text == "Hello world"
    assert r.prompt_tokens == 3  # 11 bytes -> ceil(11 / 4)
    assert r.kv_transfer_params is None and r.bootstrap == () and r.ignored_fields == ()


def test_null_max_tokens_is_the_default_and_no_model_is_the_first_name() -> None:
    r = parse_completion(body(prompt="x", max_tokens=None), SERVED)
    assert r.max_tokens == 16 and r.model == "mock-model"
    assert parse_completion(body(model="alias", prompt="x"), SERVED).model == "alias"


@pytest.mark.parametrize("prompt, counts", [
    ("abcd", [1]),
    (["abcd", "abcde"], [1, 2]),
    ([1, 2, 3], [3]),
    ([[1, 2], [3, 4, 5]], [2, 3]),
    ([1.0, "2"], [2]),  # pydantic's lax mode: integral floats and numeric strings
])
def test_the_four_prompt_forms(prompt: object, counts: list[int]) -> None:
    r = parse_completion(body(prompt=prompt), SERVED)
    assert [p.num_tokens for p in r.prompts] == counts


def test_token_ids_are_kept_and_texts_are_not_invented() -> None:
    r = parse_completion(body(prompt=[[7, 8], [9]]), SERVED)
    assert [p.token_ids for p in r.prompts] == [(7, 8), (9,)]
    assert all(p.text is None for p in r.prompts)


def test_stream_usage_ignore_eos_min_tokens_and_passthrough() -> None:
    kv = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
          "remote_block_ids": None, "remote_host": None, "remote_port": None}
    r = parse_completion(body(prompt="p", stream=True, stream_options={"include_usage": True}, ignore_eos=True,
                              max_tokens=50, min_tokens=10, kv_transfer_params=kv, request_id="abc"), SERVED)
    assert r.stream and r.include_usage and not r.continuous_usage_stats
    assert r.ignore_eos and r.max_tokens == 50 and r.min_tokens == 10
    assert r.kv_transfer_params == kv and r.request_id == "abc"


def test_stream_options_given_means_include_usage_unless_said() -> None:
    # vLLM's StreamOptions.include_usage defaults to True
    assert parse_completion(body(prompt="p", stream=True, stream_options={}), SERVED).include_usage
    assert not parse_completion(body(prompt="p", stream=True, stream_options={"include_usage": False}),
                                SERVED).include_usage
    # an empty object is falsy to vLLM's validator: allowed without stream
    assert not parse_completion(body(prompt="p", stream_options={}), SERVED).stream
    assert parse_completion(body(prompt="p", stream=True, stream_options={"continuous_usage_stats": True}),
                            SERVED).include_usage


def test_lax_booleans_and_integers() -> None:
    r = parse_completion(body(prompt="p", stream="yes", max_tokens="5", ignore_eos=1), SERVED)
    assert r.stream and r.max_tokens == 5 and r.ignore_eos


def test_sglang_bootstrap_fields_scalar_and_per_prompt() -> None:
    r = parse_completion(body(prompt="p", bootstrap_host="127.0.0.1", bootstrap_port=8998, bootstrap_room=12),
                         SERVED)
    assert r.bootstrap == (Bootstrap("127.0.0.1", 8998, 12),)
    r = parse_completion(body(prompt=["a", "b"], bootstrap_host=["h1", "h2"], bootstrap_port=None,
                              bootstrap_room=[1, 2]), SERVED)
    assert r.bootstrap == (Bootstrap("h1", None, 1), Bootstrap("h2", None, 2))
    assert refused(body(prompt=["a", "b"], bootstrap_room=[1])).param == "bootstrap_room"


def test_unknown_fields_are_ignored_and_listed_known_ones_are_not() -> None:
    r = parse_completion(body(prompt="p", temperature=0.5, top_p=0.9, stop=["x"], frobnicate=1, zeta={}), SERVED)
    assert r.ignored_fields == ("frobnicate", "zeta")


def test_chat_counts_the_rendered_messages_and_defaults_to_the_rest_of_the_context() -> None:
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    r = parse_chat(body(model="mock-model", messages=msgs), SERVED)
    text = render_chat([ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")])
    assert text == "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n"
    assert r.prompts[0].num_tokens == count_text_tokens(text)
    assert r.max_tokens == SERVED.max_model_len - r.prompt_tokens
    assert r.messages[1] == ChatMessage("user", "Hi")


def test_chat_max_completion_tokens_wins_and_text_parts_join() -> None:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    r = parse_chat(body(messages=msgs, max_completion_tokens=7, max_tokens=9), SERVED)
    assert r.max_tokens == 7 and r.messages[0].content == "a\nb"
    # vLLM takes ``max_completion_tokens or max_tokens``: a 0 falls through
    assert parse_chat(body(messages=msgs, max_completion_tokens=0, max_tokens=9), SERVED).max_tokens == 9


# -- errors ----------------------------------------------------------------------------------------

def test_the_vllm_error_body() -> None:
    err = refused(body(prompt="p", model="nope"))
    assert err.status == 404
    assert orjson.loads(err.body()) == {"error": {"message": "The model `nope` does not exist.",
                                                  "type": "NotFoundError", "param": "model", "code": 404}}


def test_the_flat_error_body_of_sglang_and_older_vllm() -> None:
    err = refused(body(prompt="p", n=0))
    assert orjson.loads(err.body(ErrorStyle.FLAT)) == {"object": "error", "message": "n must be at least 1, got 0.",
                                                       "type": "BadRequestError", "param": None, "code": 400}


def test_sglang_validation_errors_name_no_parameter() -> None:
    flat = orjson.loads(refused(body(prompt="p", max_tokens="x")).body(ErrorStyle.FLAT))
    assert (flat["object"], flat["type"], flat["param"], flat["code"]) == ("error", "Bad Request", None, 400)


def test_malformed_json_is_a_validation_error() -> None:
    err = refused(b'{"prompt": "p",')
    assert (err.status, err.kind) == (400, ErrorKind.VALIDATION)
    info = orjson.loads(err.body())["error"]
    assert info["type"] == "Bad Request" and info["code"] == 400
    assert info["message"].startswith("1 validation error:") and "json_invalid" in info["message"]
    assert info["param"].startswith("body.")
    assert refused(b"[1, 2]").param == "body"


@pytest.mark.parametrize("fields, param, kind", [
    ({"prompt": "p", "max_tokens": "many"}, "body.max_tokens", "int_parsing"),
    ({"prompt": "p", "max_tokens": 2.5}, "body.max_tokens", "int_from_float"),
    ({"prompt": "p", "stream": "maybe"}, "body.stream", "bool_parsing"),
    ({"prompt": "p", "model": 3}, "body.model", "string_type"),
    ({"prompt": "p", "kv_transfer_params": [1]}, "body.kv_transfer_params", "dict_type"),
    ({"prompt": [1, -1]}, "body.prompt.1", "greater_than_equal"),
    ({"prompt": 5}, "body.prompt", "list_type"),
    ({"prompt": "p", "n": None}, "body.n", "int_type"),
])
def test_type_errors_are_validation_errors_naming_the_field(fields: dict[str, object], param: str, kind: str) -> None:
    err = refused(orjson.dumps(fields))
    assert err.kind is ErrorKind.VALIDATION and err.param == param
    assert f"'type': '{kind}'" in err.message


@pytest.mark.parametrize("fields, param, text", [
    ({"prompt": "p", "stream_options": {"include_usage": True}}, "stream_options",
     "Stream options can only be defined when `stream=True`."),
    ({"prompt": ""}, "prompt", "Either prompt or prompt_embeds must be provided and non-empty."),
    ({}, "prompt", "Either prompt or prompt_embeds must be provided and non-empty."),
])
def test_model_validator_errors_name_their_parameter(fields: dict[str, object], param: str, text: str) -> None:
    err = refused(orjson.dumps(fields))
    assert err.kind is ErrorKind.VALIDATION and err.param == param and text in err.message


@pytest.mark.parametrize("fields, param, text", [
    ({"prompt": "p", "max_tokens": 0}, "max_tokens", "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"),
    ({"prompt": "p", "min_tokens": -1}, None, "min_tokens must be greater than or equal to 0, got -1."),
    ({"prompt": "p", "max_tokens": 4, "min_tokens": 5}, None, "min_tokens must be less than or equal to max_tokens=4, got 5."),
    ({"prompt": "p", "n": 0}, None, "n must be at least 1, got 0."),
    ({"prompt": "p", "n": 2}, "n", "dmocker serve supports n=1 only, got n=2."),
    ({"prompt": []}, None, "The decoder prompt cannot be empty"),
    ({"prompt": [[1], []]}, None, "The decoder prompt cannot be empty"),
])
def test_serving_errors_are_bad_request_errors(fields: dict[str, object], param: str | None, text: str) -> None:
    err = refused(orjson.dumps(fields))
    assert err.kind is ErrorKind.BAD_REQUEST and err.status == 400 and err.param == param
    assert err.message.startswith(text)


def test_the_context_length_checks() -> None:
    small = ServedModel(("m",), max_model_len=10)
    err = refused(body(prompt=list(range(10))), served=small)
    assert err.param == "input_tokens" and "maximum context length is 10 tokens" in err.message
    assert err.message.endswith("(parameter=input_tokens, value=10)")
    err = refused(body(prompt=list(range(8)), max_tokens=3), served=small)
    assert err.param == "max_tokens" and "(3 > 10 - 8)" in err.message
    assert parse_completion(body(prompt=list(range(8)), max_tokens=2), small).max_tokens == 2


def test_chat_errors() -> None:
    assert refused(body(), Endpoint.CHAT).message.startswith("1 validation error:")
    assert refused(body(messages=[{"content": "x"}]), Endpoint.CHAT).param == "body.messages.0.role"
    err = refused(body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]),
                  Endpoint.CHAT)
    assert err.kind is ErrorKind.BAD_REQUEST and "text only" in err.message


def test_a_stream_error_is_one_event() -> None:
    chunk = ApiError(ErrorKind.INTERNAL, "boom").stream_chunk()
    assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
    assert orjson.loads(chunk[6:])["error"]["code"] == 500


# -- counting --------------------------------------------------------------------------------------

def test_the_counting_rule_by_example() -> None:
    assert count_text_tokens("") == 0
    assert count_text_tokens("abcd") == 1 and count_text_tokens("abcde") == 2
    assert count_text_tokens("é") == 1  # 2 bytes
    assert count_text_tokens("日本語") == 3  # 9 bytes
    assert count_text_tokens(generated_text(25)) == 25  # the mock's output counts as what it generated
    assert text_token_ids("abcd") == (int.from_bytes(b"abcd", "little") | 4 << 32,)


@given(st.text())
def test_the_count_is_the_number_of_ids(text: str) -> None:
    assert len(text_token_ids(text)) == count_text_tokens(text) == -(-len(text.encode()) // 4)


@given(st.text())
def test_the_ids_are_the_groups_read_little_endian_with_their_length(text: str) -> None:
    data = text.encode()
    groups = [data[i:i + 4] for i in range(0, len(data), 4)]
    assert text_token_ids(text) == tuple(int.from_bytes(g, "little") | len(g) << 32 for g in groups)


@given(st.text(), st.text())
def test_a_shared_prefix_shares_its_whole_groups(a: str, b: str) -> None:
    whole = len((a).encode()) // 4
    assert text_token_ids(a + b)[:whole] == text_token_ids(a)[:whole]


@given(st.binary(min_size=1, max_size=4), st.binary(min_size=1, max_size=4))
def test_different_groups_get_different_ids(x: bytes, y: bytes) -> None:
    ids = {bytes_: int.from_bytes(bytes_, "little") | len(bytes_) << 32 for bytes_ in (x, y)}
    assert (ids[x] == ids[y]) == (x == y)


token_ids = st.lists(st.integers(min_value=0, max_value=2**40), min_size=1, max_size=50)


@given(token_ids)
def test_a_token_id_prompt_round_trips_its_count(ids: list[int]) -> None:
    r = parse_completion(body(prompt=ids, max_tokens=1), ServedModel(("m",), max_model_len=100))
    assert r.prompts[0].token_ids == tuple(ids) and r.prompt_tokens == len(ids)
    assert completion_usage_of(r.prompt_tokens) == len(ids)


def completion_usage_of(prompt_tokens: int) -> int:
    reply = completion_response("cmpl-0", 0, "m", [Choice(0, TOKEN_TEXT, FinishReason.LENGTH)], Usage(prompt_tokens, 1))
    return int(orjson.loads(reply)["usage"]["prompt_tokens"])


@given(st.lists(token_ids, min_size=1, max_size=5))
def test_a_batch_of_token_id_prompts_keeps_each(batch: list[list[int]]) -> None:
    r = parse_completion(body(prompt=batch, max_tokens=1), ServedModel(("m",), max_model_len=100))
    assert [p.token_ids for p in r.prompts] == [tuple(b) for b in batch]


# -- responses -------------------------------------------------------------------------------------

def test_ids_are_deterministic() -> None:
    assert response_id(Endpoint.COMPLETIONS, 7) == "cmpl-7"
    assert response_id(Endpoint.CHAT, 7) == "chatcmpl-7"


def test_a_completion_response() -> None:
    kv = {"do_remote_prefill": True, "remote_block_ids": [1, 2]}
    raw = completion_response("cmpl-3", 1700000000, "m", [Choice(0, " the", FinishReason.LENGTH)],
                              Usage(10, 1, cached_tokens=4), kv)
    out = orjson.loads(raw)
    assert out["id"] == "cmpl-3" and out["object"] == "text_completion" and out["created"] == 1700000000
    assert out["choices"][0]["text"] == " the" and out["choices"][0]["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": 10, "total_tokens": 11, "completion_tokens": 1,
                            "prompt_tokens_details": {"cached_tokens": 4}}
    assert out["kv_transfer_params"] == kv
    assert raw == completion_response("cmpl-3", 1700000000, "m", [Choice(0, " the", FinishReason.LENGTH)],
                                      Usage(10, 1, cached_tokens=4), kv)


def test_a_chat_response() -> None:
    out = orjson.loads(chat_response("chatcmpl-1", 5, "m", [Choice(0, "hi", FinishReason.STOP)], Usage(3, 2)))
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["role"] == "assistant" and out["choices"][0]["message"]["content"] == "hi"
    assert out["usage"]["total_tokens"] == 5 and out["usage"]["prompt_tokens_details"] is None


def events(chunks: list[bytes]) -> list[bytes]:
    for c in chunks:
        assert c.startswith(b"data: ") and c.endswith(b"\n\n") and c.count(b"\n\n") == 1
    return [c[6:-2] for c in chunks]


def test_a_completion_stream_with_usage() -> None:
    r = parse_completion(body(prompt="Hello world", stream=True, stream_options={"include_usage": True}), SERVED)
    chunks = stream_tokens(r, "cmpl-1", 9, num_tokens=3, finish=FinishReason.LENGTH)
    assert chunks[-1] == DONE
    payloads = [orjson.loads(e) for e in events(chunks[:-1])]
    assert [p["choices"][0]["text"] for p in payloads[:3]] == [TOKEN_TEXT] * 3
    assert [p["choices"][0]["finish_reason"] for p in payloads[:3]] == [None, None, "length"]
    assert all("usage" not in p for p in payloads[:3])
    assert payloads[3]["choices"] == [] and payloads[3]["usage"]["completion_tokens"] == 3
    assert payloads[3]["usage"]["prompt_tokens"] == r.prompt_tokens
    assert "".join(p["choices"][0]["text"] for p in payloads[:3]) == generated_text(3)


def test_a_chat_stream_starts_with_the_role_and_has_no_usage_unless_asked() -> None:
    r = parse_chat(body(messages=[{"role": "user", "content": "x"}], stream=True), SERVED)
    payloads = [orjson.loads(e) for e in events(stream_tokens(r, "chatcmpl-1", 9, 2, FinishReason.STOP)[:-1])]
    assert payloads[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [p["choices"][0]["delta"] for p in payloads[1:]] == [{"content": TOKEN_TEXT}] * 2
    assert payloads[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in p for p in payloads)


def test_continuous_usage_counts_up() -> None:
    r = parse_completion(body(prompt="abcd", stream=True, stream_options={"continuous_usage_stats": True}), SERVED)
    payloads = [orjson.loads(e) for e in events(stream_tokens(r, "cmpl-1", 0, 3, FinishReason.LENGTH)[:-1])]
    assert [p["usage"]["completion_tokens"] for p in payloads[:3]] == [1, 2, 3]


# -- robustness: any body is parsed or refused with a client error, never a crash ---------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**63, max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
FIELDS = ["model", "prompt", "messages", "max_tokens", "max_completion_tokens", "min_tokens", "n", "stream",
          "stream_options", "ignore_eos", "kv_transfer_params", "bootstrap_host", "bootstrap_port",
          "bootstrap_room", "request_id", "rid", "temperature", "unknown"]
likely = {
    "prompt": st.one_of(st.text(max_size=20), st.lists(st.integers(min_value=0, max_value=50), max_size=5),
                        st.lists(st.text(max_size=5), max_size=3), json_values),
    "messages": st.one_of(st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]),
                                                          "content": st.text(max_size=10)}), max_size=3),
                          json_values),
    "max_tokens": st.one_of(st.integers(min_value=-2, max_value=5000), json_values),
    "stream": st.one_of(st.booleans(), json_values),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": st.booleans()}), json_values),
}
bodies = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=8).flatmap(
    lambda d: st.fixed_dictionaries({k: likely.get(k, json_values) for k in d}))


def served_or_refused(fields: dict[str, object], endpoint: Endpoint) -> None:
    try:
        r = parse(endpoint, orjson.dumps(fields), ServedModel(("m",), max_model_len=64))
    except ApiError as err:
        assert err.status in (400, 404)
        assert orjson.loads(err.body())["error"]["code"] == err.status
        return
    assert 1 <= r.max_tokens and 0 <= r.min_tokens <= r.max_tokens
    assert all(p.num_tokens + r.max_tokens <= 64 for p in r.prompts)


@pytest.mark.slow  # the profile's examples of whole bodies: a few seconds
@given(bodies, st.sampled_from(list(Endpoint)))
def test_any_body_is_served_or_refused_with_a_client_error(fields: dict[str, object], endpoint: Endpoint) -> None:
    served_or_refused(fields, endpoint)


@settings(max_examples=40)
@given(bodies, st.sampled_from(list(Endpoint)))
def test_any_body_is_served_or_refused_short(fields: dict[str, object], endpoint: Endpoint) -> None:
    served_or_refused(fields, endpoint)


@given(st.binary(max_size=64))
def test_any_bytes_are_served_or_refused(raw: bytes) -> None:
    try:
        parse_completion(raw, SERVED)
    except ApiError as err:
        assert err.status in (400, 404)


def test_the_models_list() -> None:
    out = orjson.loads(models_response(SERVED, 12))
    assert out["object"] == "list"
    assert [(m["id"], m["object"], m["owned_by"], m["max_model_len"], m["created"]) for m in out["data"]] == [
        ("mock-model", "model", "vllm", 4096, 12), ("alias", "model", "vllm", 4096, 12)]
    assert out["data"][0]["permission"][0]["object"] == "model_permission"


# -- the bodies real proxies send (docs/real-proxies.md) -----------------------------------------------

def test_the_two_legs_of_vllms_nixl_proxy() -> None:
    client = {"model": "mock-model", "prompt": "Tell me a story", "max_tokens": 40, "min_tokens": 5, "stream": True,
              "stream_options": {"include_usage": True}}
    # the prefill leg: kv_transfer_params added, stream off, one token, stream_options and min_tokens dropped
    prefill_body = {k: v for k, v in client.items() if k not in ("stream_options", "min_tokens")}
    prefill_body.update(stream=False, max_tokens=1, kv_transfer_params={
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None, "remote_block_ids": None,
        "remote_host": None, "remote_port": None})
    prefill = parse_completion(orjson.dumps(prefill_body), SERVED)
    assert (prefill.max_tokens, prefill.stream, prefill.min_tokens) == (1, False, 0)
    assert prefill.kv_transfer_params is not None and prefill.kv_transfer_params["do_remote_decode"] is True
    # the prefill worker's answer carries its own kv_transfer_params back
    returned = {"do_remote_prefill": True, "do_remote_decode": False, "remote_block_ids": [0, 1],
                "remote_engine_id": "prefill-0", "remote_request_id": "r-1", "remote_host": "127.0.0.1",
                "remote_port": 5600, "tp_size": 1}
    answer = orjson.loads(completion_response("cmpl-0", 0, prefill.model, [Choice(0, TOKEN_TEXT, FinishReason.LENGTH)],
                                              Usage(prefill.prompt_tokens, 1), returned))
    # the decode leg: the client's body with the prefill's kv_transfer_params
    decode = parse_completion(orjson.dumps({**client, "kv_transfer_params": answer["kv_transfer_params"]}), SERVED)
    assert decode.kv_transfer_params == returned
    assert (decode.max_tokens, decode.min_tokens, decode.stream, decode.include_usage) == (40, 5, True, True)
    assert decode.prompts == prefill.prompts


def test_sglang_routers_body_reaches_both_workers_alike() -> None:
    body_ = {"model": "mock-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True,
             "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 2**63 - 1}
    r = parse_chat(orjson.dumps(body_), SERVED)
    assert r.bootstrap == (Bootstrap("127.0.0.1", 8998, 2**63 - 1),) and r.ignored_fields == ()
