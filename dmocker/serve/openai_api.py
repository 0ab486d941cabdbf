"""The OpenAI-compatible front of a mock worker, as pure functions (no I/O, no clock).

What it does, and whose behaviour it copies (``vllm-project/vllm`` unless said otherwise):

* **Parsing** ``/v1/completions`` and ``/v1/chat/completions`` bodies
  (:func:`parse_completion`, :func:`parse_chat`) into a :class:`GenerationRequest`. The fields
  and their defaults are those of ``CompletionRequest`` (``vllm/entrypoints/openai/completion/
  protocol.py``) and ``ChatCompletionRequest`` (``vllm/entrypoints/openai/chat_completion/
  protocol.py``): ``max_tokens`` defaults to 16 for completions (``null`` too); for chat,
  ``max_completion_tokens or max_tokens``, else what is left of the context. Values are
  coerced the way pydantic's lax mode coerces them (``"5"`` and ``5.0`` are 5, ``"yes"`` is
  true). ``kv_transfer_params`` (vLLM's disaggregated serving) and SGLang's ``bootstrap_host``,
  ``bootstrap_port``, ``bootstrap_room`` (``sgl-project/sglang``
  ``python/sglang/srt/entrypoints/openai/protocol.py``) are passed through.
* **Unknown fields are ignored, not rejected.** vLLM's ``OpenAIBaseModel``
  (``vllm/entrypoints/openai/engine/protocol.py``) is a pydantic model with ``extra="allow"``
  whose wrap validator logs "The following fields were present in the request but ignored"
  and goes on; SGLang's request models keep pydantic's default (extra fields ignored). The
  parsed request lists them (:attr:`GenerationRequest.ignored_fields`) for the server to log.
  Sampling fields the mock has no use for (``temperature``, ``top_p``, ``stop``, …) are known
  fields: accepted, not checked, and not listed.
* **Errors** as vLLM and SGLang answer them: :mod:`dmocker.serve.openai_errors`.
* **Counting text as tokens** without a tokenizer (:func:`text_token_ids`): one token per four
  bytes of UTF-8, the last group shorter (``ceil(len(utf8) / 4)`` tokens). Chat messages are
  rendered to one text first (:func:`render_chat`). docs/serve.md says why this rule.
* **Responses** (bodies, streamed chunks): :mod:`dmocker.serve.openai_responses`.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import orjson

from .openai_errors import (
    ApiError,
    ErrorKind,
    JsonObject,
    JsonValue,
    serving_error,
    validation_error,
    validator_error,
)

#: vLLM's ``CompletionRequest.max_tokens`` default.
DEFAULT_COMPLETION_MAX_TOKENS: Final = 16
BYTES_PER_TOKEN: Final = 4


# -- counting text as tokens -------------------------------------------------------------------

def text_token_ids(text: str) -> tuple[int, ...]:
    """The mock's tokens of ``text``: one per four bytes of its UTF-8, the last group shorter.

    A token's id is its bytes read as a little-endian integer with the group's length above
    them (``bytes + len << 32``), so different groups get different ids and two texts that
    share a prefix share the tokens of its whole groups (prefix caching sees them).
    """
    data = text.encode("utf-8")
    whole = len(data) // BYTES_PER_TOKEN
    # numpy reads the whole groups at once: a long prompt is counted on the event loop
    ids: list[int] = (np.frombuffer(data, dtype="<u4", count=whole).astype(np.int64)
                      | (BYTES_PER_TOKEN << 32)).tolist()
    tail = data[whole * BYTES_PER_TOKEN:]
    if tail:
        ids.append(int.from_bytes(tail, "little") | len(tail) << 32)
    return tuple(ids)


def count_text_tokens(text: str) -> int:
    """``len(text_token_ids(text))`` without building them: ``ceil(UTF-8 bytes / 4)``."""
    return -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN)


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


def render_chat(messages: Sequence[ChatMessage]) -> str:
    """The text a chat's prompt is counted from: each message as ``<|role|>\\ncontent\\n``,
    then ``<|assistant|>\\n`` (vLLM adds the generation prompt by default)."""
    return "".join(f"<|{m.role}|>\n{m.content}\n" for m in messages) + "<|assistant|>\n"


# -- the parsed request ------------------------------------------------------------------------

class Endpoint(enum.Enum):
    COMPLETIONS = "/v1/completions"
    CHAT = "/v1/chat/completions"


@dataclass(frozen=True)
class Prompt:
    """One prompt: its tokens, and its text when it was given as text (or chat messages)."""

    token_ids: tuple[int, ...]
    text: str | None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True)
class Bootstrap:
    """SGLang's rendezvous of one prompt's prefill and decode: the prefill's bootstrap server and room."""

    host: str | None
    port: int | None
    room: int | None


@dataclass(frozen=True)
class ServedModel:
    """What the worker serves: the names it answers to (the first is reported) and its context length."""

    names: tuple[str, ...]
    max_model_len: int

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("a served model needs a name")
        if self.max_model_len < 2:
            raise ValueError(f"max_model_len must be at least 2, got {self.max_model_len}")


@dataclass(frozen=True)
class GenerationRequest:
    """A checked ``/v1/completions`` or ``/v1/chat/completions`` request."""

    endpoint: Endpoint
    model: str
    #: one per prompt of a completion batch; a chat has one
    prompts: tuple[Prompt, ...]
    #: a chat's messages (empty for a completion)
    messages: tuple[ChatMessage, ...]
    #: the output length cap in force (the request's, or the default)
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage_stats: bool
    kv_transfer_params: JsonObject | None
    #: SGLang's bootstrap fields, one per prompt, or empty when the request has none
    bootstrap: tuple[Bootstrap, ...]
    #: the body's ``request_id`` (vLLM) or ``rid`` (SGLang), when given
    request_id: str | None
    #: fields neither vLLM nor SGLang defines: ignored, to be logged
    ignored_fields: tuple[str, ...]

    @property
    def prompt_tokens(self) -> int:
        return sum(p.num_tokens for p in self.prompts)


# Fields of vLLM's and SGLang's request models that the mock accepts without using: they
# shape sampling or output, not the timing a mock reproduces.
_COMMON_FIELDS: Final = frozenset({
    "model", "n", "max_tokens", "min_tokens", "ignore_eos", "stream", "stream_options",
    "kv_transfer_params", "ec_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room",
    "request_id", "rid", "user", "seed", "stop", "stop_token_ids", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "logit_bias", "logprobs",
    "prompt_logprobs", "use_beam_search", "length_penalty", "include_stop_str_in_output",
    "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens", "truncation_side",
    "allowed_token_ids", "bad_words", "response_format", "structured_outputs", "guided_json",
    "guided_regex", "guided_choice", "guided_grammar", "priority", "cache_salt", "vllm_xargs",
    "return_tokens_as_token_ids", "return_token_ids", "add_special_tokens", "lora_path", "session_id",
    "stream_interval", "thinking_token_budget", "repetition_detection", "logprob_token_ids",
    "service_tier", "return_hidden_states", "data_parallel_rank", "no_stop_trim", "regex", "ebnf",
    "json_schema", "custom_logit_processor", "custom_params", "watermarking",
})
_COMPLETION_FIELDS: Final = _COMMON_FIELDS | {"prompt", "prompt_embeds", "echo", "suffix", "best_of"}
_CHAT_FIELDS: Final = _COMMON_FIELDS | {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "chat_template", "chat_template_kwargs", "add_generation_prompt", "continue_final_message",
    "documents", "mm_processor_kwargs", "echo", "reasoning_effort", "separate_reasoning",
    "stream_reasoning", "functions", "function_call", "modalities", "audio", "metadata", "store",
    "prediction", "web_search_options", "include_reasoning",
}

_TRUE_STRINGS: Final = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE_STRINGS: Final = frozenset({"0", "off", "f", "false", "n", "no"})


def decode_body(body: bytes) -> JsonObject:
    """The JSON object of a request body; malformed JSON or another JSON value is a 400 as FastAPI gives it."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise validation_error("json_invalid", [exc.pos], "JSON decode error", {}) from None
    if not isinstance(data, dict):
        raise validation_error("model_attributes_type", [],
                               "Input should be a valid dictionary or object to extract fields from", data)
    return data


def _int(data: Mapping[str, JsonValue], name: str, default: int | None, loc: Sequence[str | int] = ()) -> int | None:
    """An optional integer field."""
    value = data.get(name)
    return default if value is None else _lax_int(value, [*loc, name])


def _lax_int(value: JsonValue, where: Sequence[str | int]) -> int:
    """An integer as pydantic's lax mode takes one: also a bool, an integral float, a numeric string."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        raise validation_error("int_from_float", where,
                               "Input should be a valid integer, got a number with a fractional part", value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise validation_error("int_parsing", where,
                                   "Input should be a valid integer, unable to parse string as an integer",
                                   value) from None
    raise validation_error("int_type", where, "Input should be a valid integer", value)


def _bool(data: Mapping[str, JsonValue], name: str, default: bool, loc: Sequence[str | int] = ()) -> bool:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE_STRINGS | _FALSE_STRINGS:
        return value.strip().lower() in _TRUE_STRINGS
    if isinstance(value, (int, float, str)):
        raise validation_error("bool_parsing", [*loc, name], "Input should be a valid boolean, unable to interpret input",
                               value)
    raise validation_error("bool_type", [*loc, name], "Input should be a valid boolean", value)


def _str(data: Mapping[str, JsonValue], name: str) -> str | None:
    value = data.get(name)
    if value is None or isinstance(value, str):
        return value
    raise validation_error("string_type", [name], "Input should be a valid string", value)


def _object(data: Mapping[str, JsonValue], name: str) -> JsonObject | None:
    value = data.get(name)
    if value is None or isinstance(value, dict):
        return value
    raise validation_error("dict_type", [name], "Input should be a valid dictionary", value)


def _token_id(value: JsonValue, loc: Sequence[str | int]) -> int:
    """One token id of a prompt: an integer (lax), at least 0 (vLLM's ``Field(ge=0)``)."""
    token = _lax_int(value, loc)
    if token < 0:
        raise validation_error("greater_than_equal", loc, "Input should be greater than or equal to 0", value)
    return token


def _prompts(data: Mapping[str, JsonValue]) -> tuple[Prompt, ...]:
    """``prompt`` as text, a list of texts, token ids, or a list of token-id lists."""
    prompt = data.get("prompt")
    if prompt is None or prompt == "":
        raise validator_error("Either prompt or prompt_embeds must be provided and non-empty.", "prompt", None)
    if isinstance(prompt, str):
        return (Prompt(text_token_ids(prompt), prompt),)
    if not isinstance(prompt, list):
        raise validation_error("list_type", ["prompt"], "Input should be a valid list", prompt)
    if not prompt:
        raise serving_error("The decoder prompt cannot be empty")
    if all(isinstance(p, str) for p in prompt):
        texts = [p for p in prompt if isinstance(p, str)]
        if any(t == "" for t in texts):
            raise serving_error("The decoder prompt cannot be empty")
        return tuple(Prompt(text_token_ids(t), t) for t in texts)
    if all(isinstance(p, list) for p in prompt):
        out = []
        for i, ids in enumerate(prompt):
            assert isinstance(ids, list)
            if not ids:
                raise serving_error("The decoder prompt cannot be empty")
            out.append(Prompt(tuple(_token_id(v, ["prompt", i, j]) for j, v in enumerate(ids)), None))
        return tuple(out)
    return (Prompt(tuple(_token_id(v, ["prompt", j]) for j, v in enumerate(prompt)), None),)


def _messages(data: Mapping[str, JsonValue]) -> tuple[ChatMessage, ...]:
    """Chat messages with text content: a string, or a list of ``{"type": "text", "text": ...}`` parts."""
    raw = data.get("messages")
    if raw is None:
        raise validation_error("missing", ["messages"], "Field required", None)
    if not isinstance(raw, list):
        raise validation_error("list_type", ["messages"], "Input should be a valid list", raw)
    messages = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise validation_error("dict_type", ["messages", i], "Input should be a valid dictionary", m)
        role = m.get("role")
        if not isinstance(role, str):
            raise validation_error("missing" if role is None else "string_type", ["messages", i, "role"],
                                   "Field required" if role is None else "Input should be a valid string", role)
        content = m.get("content")
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        elif isinstance(content, list):
            parts = []
            for j, part in enumerate(content):
                if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                    raise serving_error(f"dmocker serves text only: content part {j} of message {i} is not "
                                        "{'type': 'text', 'text': ...}")
                text_part = part["text"]
                assert isinstance(text_part, str)
                parts.append(text_part)
            text = "\n".join(parts)
        else:
            raise validation_error("string_type", ["messages", i, "content"], "Input should be a valid string",
                                   content)
        messages.append(ChatMessage(role, text))
    return tuple(messages)


def _bootstrap(data: Mapping[str, JsonValue], prompts: int) -> tuple[Bootstrap, ...]:
    """SGLang's ``bootstrap_host``/``bootstrap_port``/``bootstrap_room``: scalars, or one per prompt of a batch."""
    names = ("bootstrap_host", "bootstrap_port", "bootstrap_room")
    if all(data.get(n) is None for n in names):
        return ()
    columns: list[list[JsonValue]] = []
    for name in names:
        value = data.get(name)
        if isinstance(value, list):
            if len(value) != prompts:
                raise serving_error(f"{name} has {len(value)} entries for {prompts} prompts", name)
            columns.append(value)
        else:
            columns.append([value] * prompts)
    out = []
    for i, (host, port, room) in enumerate(zip(*columns)):
        if host is not None and not isinstance(host, str):
            raise validation_error("string_type", ["bootstrap_host", i], "Input should be a valid string", host)
        port_n = None if port is None else _lax_int(port, ["bootstrap_port", i])
        room_n = None if room is None else _lax_int(room, ["bootstrap_room", i])
        if room_n is not None and room_n < 0:
            raise validation_error("greater_than_equal", ["bootstrap_room", i],
                                   "Input should be greater than or equal to 0", room)
        out.append(Bootstrap(host, port_n, room_n))
    return tuple(out)


def _stream_options(data: Mapping[str, JsonValue], stream: bool) -> tuple[bool, bool]:
    """``(include_usage, continuous_usage_stats)``; options without ``stream`` are refused as vLLM does."""
    options = _object(data, "stream_options")
    if options and not stream:
        raise validator_error("Stream options can only be defined when `stream=True`.", "stream_options", options)
    if options is None:
        return False, False
    # vLLM's StreamOptions: include_usage defaults to true once the object is given
    return (_bool(options, "include_usage", True, ["stream_options"]),
            _bool(options, "continuous_usage_stats", False, ["stream_options"]))


def _resolve_model(data: Mapping[str, JsonValue], served: ServedModel) -> str:
    model = _str(data, "model")
    if model is None:  # vLLM serves a request without a model with its first served name
        return served.names[0]
    if model not in served.names:
        raise ApiError(ErrorKind.NOT_FOUND, f"The model `{model}` does not exist.", "model")
    return model


def _check_lengths(prompts: Sequence[Prompt], max_tokens: int | None, max_model_len: int) -> None:
    """vLLM's context checks (``_validate_input`` in ``vllm/entrypoints/openai/engine/serving.py``)."""
    for p in prompts:
        if p.num_tokens >= max_model_len:
            raise serving_error(f"This model's maximum context length is {max_model_len} tokens. However, your "
                                f"request has {p.num_tokens} input tokens. Please reduce the length of the input "
                                "messages.", "input_tokens", p.num_tokens)
        if max_tokens is not None and p.num_tokens + max_tokens > max_model_len:
            raise serving_error(f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
                                f"maximum context length is {max_model_len} tokens and your request has "
                                f"{p.num_tokens} input tokens ({max_tokens} > {max_model_len} - {p.num_tokens}).",
                                "max_tokens", max_tokens)


def _check_sampling(n: int, max_tokens: int, min_tokens: int) -> None:
    """vLLM's ``SamplingParams`` checks (``vllm/sampling_params.py``), and the mock's one limit: ``n`` = 1."""
    if n < 1:
        raise serving_error(f"n must be at least 1, got {n}.")
    if n > 1:
        # vLLM samples n sequences; the mock's engines run one sequence per request
        raise serving_error(f"dmocker serve supports n=1 only, got n={n}.", "n", n)
    if max_tokens < 1:
        raise serving_error(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens)
    if min_tokens < 0:
        raise serving_error(f"min_tokens must be greater than or equal to 0, got {min_tokens}.")
    if min_tokens > max_tokens:
        raise serving_error(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.")


def _request_id(data: Mapping[str, JsonValue]) -> str | None:
    for name in ("request_id", "rid"):
        value = data.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise validation_error("string_type", [name], "Input should be a valid string", value)
            return value
    return None


def parse_completion(body: bytes | JsonObject, served: ServedModel) -> GenerationRequest:
    """A ``/v1/completions`` body, checked in vLLM's order: the request model, then the model
    name, then the context, then the sampling parameters. Raises :class:`ApiError`."""
    data = decode_body(body) if isinstance(body, bytes) else body
    stream = _bool(data, "stream", False)
    include_usage, continuous = _stream_options(data, stream)
    prompts = _prompts(data)
    max_tokens = _int(data, "max_tokens", DEFAULT_COMPLETION_MAX_TOKENS)
    assert max_tokens is not None
    min_tokens = _int(data, "min_tokens", 0)
    assert min_tokens is not None
    if "n" in data and data["n"] is None:  # n is not Optional in vLLM's CompletionRequest
        raise validation_error("int_type", ["n"], "Input should be a valid integer", None)
    n = _int(data, "n", 1)
    assert n is not None
    ignore_eos = _bool(data, "ignore_eos", False)
    kv = _object(data, "kv_transfer_params")
    bootstrap = _bootstrap(data, len(prompts))
    request_id = _request_id(data)
    model = _resolve_model(data, served)
    _check_lengths(prompts, max_tokens, served.max_model_len)
    _check_sampling(n, max_tokens, min_tokens)
    return GenerationRequest(Endpoint.COMPLETIONS, model, prompts, (), max_tokens, min_tokens, ignore_eos, stream,
                             include_usage, continuous, kv, bootstrap, request_id,
                             tuple(sorted(k for k in data if k not in _COMPLETION_FIELDS)))


def parse_chat(body: bytes | JsonObject, served: ServedModel) -> GenerationRequest:
    """A ``/v1/chat/completions`` body; the prompt is :func:`render_chat` of the messages."""
    data = decode_body(body) if isinstance(body, bytes) else body
    stream = _bool(data, "stream", False)
    include_usage, continuous = _stream_options(data, stream)
    messages = _messages(data)
    text = render_chat(messages)
    prompts = (Prompt(text_token_ids(text), text),)
    # vLLM: ``max_completion_tokens or max_tokens`` (a 0 falls through to the other)
    asked = _int(data, "max_completion_tokens", None) or _int(data, "max_tokens", None)
    min_tokens = _int(data, "min_tokens", 0)
    assert min_tokens is not None
    n = _int(data, "n", 1)  # Optional in vLLM's ChatCompletionRequest: null is 1
    assert n is not None
    ignore_eos = _bool(data, "ignore_eos", False)
    kv = _object(data, "kv_transfer_params")
    bootstrap = _bootstrap(data, 1)
    request_id = _request_id(data)
    model = _resolve_model(data, served)
    _check_lengths(prompts, asked, served.max_model_len)
    max_tokens = asked if asked is not None else served.max_model_len - prompts[0].num_tokens
    _check_sampling(n, max_tokens, min_tokens)
    return GenerationRequest(Endpoint.CHAT, model, prompts, messages, max_tokens, min_tokens, ignore_eos, stream,
                             include_usage, continuous, kv, bootstrap, request_id,
                             tuple(sorted(k for k in data if k not in _CHAT_FIELDS)))


def parse(endpoint: Endpoint, body: bytes | JsonObject, served: ServedModel) -> GenerationRequest:
    return parse_completion(body, served) if endpoint is Endpoint.COMPLETIONS else parse_chat(body, served)
