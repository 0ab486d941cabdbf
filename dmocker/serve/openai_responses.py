"""The responses of the OpenAI front, as pure functions: non-streaming completion and chat objects
with ``usage``, streamed chunks framed as Server-Sent Events (``data: {...}\\n\\n``, then
``data: [DONE]\\n\\n``), the final usage chunk when ``stream_options.include_usage``, the model
list.  Ids are ``cmpl-<n>`` / ``chatcmpl-<n>`` from a number the caller gives, and ``created`` is
passed in: the same arguments give the same bytes.  Shapes as vLLM writes them
(``vllm-project/vllm`` ``vllm/entrypoints/openai/``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import orjson

from .openai_api import Endpoint, GenerationRequest, ServedModel
from .openai_errors import JsonObject, JsonValue, sse

#: The bytes that end every stream.
DONE: Final = b"data: [DONE]\n\n"
#: The text of every generated token: four bytes, so one token under :func:`text_token_ids`,
#: and one token in the common BPE vocabularies, so clients that count output tokens with a
#: real tokenizer count what the mock generated.
TOKEN_TEXT: Final = " the"


class FinishReason(enum.Enum):
    """``finish_reason`` of a choice (vLLM's ``FINISH_REASON_STRINGS``, ``vllm/v1/engine/__init__.py``)."""

    STOP = "stop"
    LENGTH = "length"
    ABORT = "abort"
    ERROR = "error"


@dataclass(frozen=True)
class Usage:
    """``usage`` of a response; ``cached_tokens`` (prefix-cache hits) is reported when not None."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> JsonObject:
        # the field order of vLLM's UsageInfo
        details: JsonValue = None if self.cached_tokens is None else {"cached_tokens": self.cached_tokens}
        return {"prompt_tokens": self.prompt_tokens, "total_tokens": self.total_tokens,
                "completion_tokens": self.completion_tokens, "prompt_tokens_details": details}


@dataclass(frozen=True)
class Choice:
    """One choice of a response, or its delta in a streamed chunk."""

    index: int
    text: str
    finish_reason: FinishReason | None = None


def response_id(endpoint: Endpoint, number: int) -> str:
    """``cmpl-<n>`` or ``chatcmpl-<n>``: vLLM's prefixes, with the caller's counter instead of a random id."""
    return f"{'cmpl' if endpoint is Endpoint.COMPLETIONS else 'chatcmpl'}-{number}"


def generated_text(num_tokens: int) -> str:
    """The text of ``num_tokens`` generated tokens."""
    return TOKEN_TEXT * num_tokens




def _finish(reason: FinishReason | None) -> JsonValue:
    return None if reason is None else reason.value


def completion_response(rid: str, created: int, model: str, choices: Sequence[Choice], usage: Usage,
                        kv_transfer_params: JsonObject | None = None) -> bytes:
    """A non-streaming ``text_completion`` body (vLLM's ``CompletionResponse``)."""
    body: JsonObject = {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [{"index": c.index, "text": c.text, "logprobs": None, "finish_reason": _finish(c.finish_reason),
                     "stop_reason": None, "prompt_logprobs": None} for c in choices],
        "usage": usage.to_json(), "kv_transfer_params": kv_transfer_params,
    }
    return orjson.dumps(body)


def chat_response(rid: str, created: int, model: str, choices: Sequence[Choice], usage: Usage,
                  kv_transfer_params: JsonObject | None = None) -> bytes:
    """A non-streaming ``chat.completion`` body (vLLM's ``ChatCompletionResponse``)."""
    body: JsonObject = {
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": c.index, "message": {"role": "assistant", "content": c.text, "tool_calls": []},
                     "logprobs": None, "finish_reason": _finish(c.finish_reason), "stop_reason": None}
                    for c in choices],
        "usage": usage.to_json(), "prompt_logprobs": None, "kv_transfer_params": kv_transfer_params,
    }
    return orjson.dumps(body)


def response(endpoint: Endpoint, rid: str, created: int, model: str, choices: Sequence[Choice], usage: Usage,
             kv_transfer_params: JsonObject | None = None) -> bytes:
    build = completion_response if endpoint is Endpoint.COMPLETIONS else chat_response
    return build(rid, created, model, choices, usage, kv_transfer_params)


def completion_chunk(rid: str, created: int, model: str, choice: Choice, usage: Usage | None = None) -> bytes:
    """One streamed ``text_completion`` chunk, SSE-framed; ``usage`` only with continuous usage stats.

    vLLM writes chunks with ``exclude_unset``: the fields it sets, nulls included, and no
    ``usage`` key unless it set one (``vllm/entrypoints/openai/completion/serving.py``)."""
    payload: JsonObject = {"id": rid, "object": "text_completion", "created": created, "model": model,
                           "choices": [{"index": choice.index, "text": choice.text, "logprobs": None,
                                        "finish_reason": _finish(choice.finish_reason), "stop_reason": None}]}
    if usage is not None:
        payload["usage"] = usage.to_json()
    return sse(payload)


def chat_chunk(rid: str, created: int, model: str, choice: Choice, first: bool = False,
               usage: Usage | None = None) -> bytes:
    """One streamed ``chat.completion.chunk``, SSE-framed. The first chunk of a choice carries
    the role (vLLM sends ``{"role": "assistant", "content": ""}`` before any token)."""
    delta: JsonObject = {"role": "assistant", "content": choice.text} if first else {"content": choice.text}
    payload: JsonObject = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                           "choices": [{"index": choice.index, "delta": delta, "logprobs": None,
                                        "finish_reason": _finish(choice.finish_reason)}]}
    if usage is not None:
        payload["usage"] = usage.to_json()
    return sse(payload)


def usage_chunk(endpoint: Endpoint, rid: str, created: int, model: str, usage: Usage) -> bytes:
    """The last chunk before ``[DONE]`` when ``include_usage``: no choices, the request's usage.

    vLLM writes this chunk without its null fields (``exclude_none``), so ``prompt_tokens_details``
    is there only when cached tokens are reported."""
    kind = "text_completion" if endpoint is Endpoint.COMPLETIONS else "chat.completion.chunk"
    counts: JsonObject = {k: v for k, v in usage.to_json().items() if v is not None}
    return sse({"id": rid, "object": kind, "created": created, "model": model, "choices": [], "usage": counts})


def models_response(served: ServedModel, created: int) -> bytes:
    """The body of ``GET /v1/models``: vLLM's ``ModelList`` of ``ModelCard``, one per served name
    (``vllm/entrypoints/openai/engine/protocol.py``), with a counter for the permission ids vLLM draws at random."""
    cards: list[JsonValue] = []
    for i, name in enumerate(served.names):
        permission: JsonObject = {
            "id": f"modelperm-{i}", "object": "model_permission", "created": created,
            "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
            "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False, "organization": "*",
            "group": None, "is_blocking": False}
        cards.append({"id": name, "object": "model", "created": created, "owned_by": "vllm", "root": served.names[0],
                      "parent": None, "max_model_len": served.max_model_len, "permission": [permission]})
    return orjson.dumps({"object": "list", "data": cards})


def stream_tokens(request: GenerationRequest, rid: str, created: int, num_tokens: int,
                  finish: FinishReason, cached_tokens: int | None = None) -> list[bytes]:
    """Every chunk of a finished stream of ``num_tokens`` tokens, in order, ending with ``[DONE]``.

    For a caller that has all the tokens at once (tests, a replay of a stream); a live server
    sends :func:`completion_chunk`/:func:`chat_chunk` as each token is due.
    """
    out: list[bytes] = []
    chat = request.endpoint is Endpoint.CHAT
    model = request.model
    running = 0
    if chat:
        out.append(chat_chunk(rid, created, model, Choice(0, ""), first=True))
    for i in range(num_tokens):
        running += 1
        reason = finish if i == num_tokens - 1 else None
        usage = Usage(request.prompt_tokens, running, cached_tokens) if request.continuous_usage_stats else None
        choice = Choice(0, TOKEN_TEXT, reason)
        out.append(chat_chunk(rid, created, model, choice, usage=usage) if chat
                   else completion_chunk(rid, created, model, choice, usage))
    if num_tokens == 0:
        choice = Choice(0, "", finish)
        out.append(chat_chunk(rid, created, model, choice) if chat else completion_chunk(rid, created, model, choice))
    if request.include_usage:
        out.append(usage_chunk(request.endpoint, rid, created, model,
                               Usage(request.prompt_tokens, num_tokens, cached_tokens)))
    out.append(DONE)
    return out
