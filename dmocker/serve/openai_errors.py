"""The wire format both halves of the OpenAI front share: JSON value types, Server-Sent Event
framing, and the errors a server answers with (:class:`ApiError`).

Errors as vLLM's server returns them (``vllm-project/vllm``). The body is
``{"error": {"message", "type", "param", "code"}}`` with ``code`` the HTTP status
(``ErrorResponse``/``ErrorInfo`` in ``vllm/entrypoints/openai/engine/protocol.py``; built by
``create_error_response`` in ``vllm/entrypoints/serve/exception_handling/error_response.py``).
Two kinds of 400 differ in ``type``: a body that fails the request model (a wrong type, a model
validator such as ``stream_options`` without ``stream``) goes through FastAPI's
``RequestValidationError`` handler (``vllm/entrypoints/serve/exception_handling/handlers/
validation.py``), whose ``type`` is ``"Bad Request"`` and whose message starts ``"1 validation
error:"``; an error found while serving (context too long, ``max_tokens`` < 1) has ``type``
``"BadRequestError"``. An unknown model is 404 ``"NotFoundError"`` with ``param`` ``"model"``.
Older vLLM releases, and SGLang today (``ErrorResponse`` in ``sgl-project/sglang``
``python/sglang/srt/entrypoints/openai/protocol.py``), send the flat shape ``{"object":
"error", "message", "type", "param", "code"}``: :class:`ErrorStyle` picks one. SGLang's
validation errors are ``"Bad Request"`` too, with no ``param``
(``python/sglang/srt/entrypoints/http_server.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TypeAlias

import orjson

JsonValue: TypeAlias = "None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]"
JsonObject: TypeAlias = "dict[str, JsonValue]"


def sse(payload: JsonObject) -> bytes:
    """One Server-Sent Event: ``data: <json>`` and a blank line."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


# -- errors -----------------------------------------------------------------------------------

class ErrorKind(enum.Enum):
    """What went wrong, as vLLM's server classifies it: the ``type`` string and the status."""

    #: the body does not fit the request model (FastAPI's ``RequestValidationError``)
    VALIDATION = ("Bad Request", 400)
    #: found while serving the request (``VLLMValidationError``, ``ValueError``)
    BAD_REQUEST = ("BadRequestError", 400)
    NOT_FOUND = ("NotFoundError", 404)
    INTERNAL = ("InternalServerError", 500)
    #: the server cannot take the request now (dmocker serve: its request capacity is used up)
    SERVICE_UNAVAILABLE = ("ServiceUnavailableError", 503)

    @property
    def type_name(self) -> str:
        return self.value[0]

    @property
    def status(self) -> int:
        return self.value[1]


class ErrorStyle(enum.Enum):
    """The shape of an error body."""

    #: ``{"error": {"message", "type", "param", "code"}}``: vLLM now
    VLLM = "vllm"
    #: ``{"object": "error", "message", "type", "param", "code"}``: SGLang, and vLLM before ``ErrorInfo``
    FLAT = "flat"


class ApiError(Exception):
    """A request the server refuses: HTTP status, ``type``, message and the offending parameter."""

    def __init__(self, kind: ErrorKind, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.param = param

    @property
    def status(self) -> int:
        return self.kind.status

    def to_json(self, style: ErrorStyle = ErrorStyle.VLLM) -> JsonObject:
        if style is ErrorStyle.FLAT:
            # SGLang's RequestValidationError handler names no parameter
            # (python/sglang/srt/entrypoints/http_server.py)
            param = None if self.kind is ErrorKind.VALIDATION else self.param
            return {"object": "error", "message": self.message, "type": self.kind.type_name, "param": param,
                    "code": self.kind.status}
        return {"error": {"message": self.message, "type": self.kind.type_name, "param": self.param,
                          "code": self.kind.status}}

    def body(self, style: ErrorStyle = ErrorStyle.VLLM) -> bytes:
        """The response body (JSON) of this error."""
        return orjson.dumps(self.to_json(style))

    def stream_chunk(self, style: ErrorStyle = ErrorStyle.VLLM) -> bytes:
        """The error as one SSE event, for a stream that fails after it started (vLLM then sends ``[DONE]``)."""
        return sse(self.to_json(style))


def validation_error(kind: str, loc: Sequence[str | int], msg: str, value: JsonValue = None,
                     param: str | None = None) -> ApiError:
    """A 400 as vLLM's ``RequestValidationError`` handler words one pydantic error.

    ``loc`` is the error's location under ``body``; ``param`` is the dotted location unless a
    model validator named its parameter. The message is ``"1 validation error:\\n  {...}"``
    with the error's ``type``, ``loc``, ``msg`` and a short ``input``, as the handler formats it;
    pydantic's own wording of union errors (one line per branch) is not reproduced.
    """
    dotted = ".".join(["body", *(str(p) for p in loc)])
    error: dict[str, object] = {"type": kind, "loc": dotted, "msg": msg, "input": _short_input(value)}
    return ApiError(ErrorKind.VALIDATION, f"1 validation error:\n  {error!r}", param if param is not None else dotted)


def _short_input(value: JsonValue) -> object:
    """The handler's stand-in for a large input: containers by size, long strings cut."""
    if isinstance(value, str):
        return value if len(value) <= 200 else value[:200] + "...[truncated]"
    if isinstance(value, (list, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    return value


def validator_error(message: str, param: str, value: JsonValue) -> ApiError:
    """A 400 raised by one of vLLM's model validators (a ``VLLMValidationError`` inside pydantic).

    Pydantic wraps it as a ``value_error`` on the whole body, and the handler takes ``param``
    from the exception; ``str()`` of the exception ends ``(parameter=...)``.
    """
    return validation_error("value_error", [], f"Value error, {message} (parameter={param})", value, param=param)


def serving_error(message: str, param: str | None = None, value: int | None = None) -> ApiError:
    """A 400 found while serving; with ``param`` it is a ``VLLMValidationError``, whose text names it."""
    extras = []
    if param is not None:
        extras.append(f"parameter={param}")
    if value is not None:
        extras.append(f"value={value}")
    return ApiError(ErrorKind.BAD_REQUEST, f"{message} ({', '.join(extras)})" if extras else message, param)
