"""Errors in the shape of the API a route speaks, so each SDK raises its own exception class.

OpenAI:    {"error": {"message", "type", "param", "code"}}
Anthropic: {"type": "error", "error": {"type", "message"}}

Every failure a request can cause is answered this way (bad JSON, a missing field, a wrong key, an
unknown model or route, a full queue); an unexpected one is a 500 in the same shape, logged here,
with no traceback sent to the client.
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

log = logging.getLogger("rlvr.serve")

# status -> (OpenAI type, Anthropic type)
_TYPES = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "authentication_error"),
    404: ("not_found_error", "not_found_error"),
    405: ("invalid_request_error", "invalid_request_error"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_error"),
    500: ("server_error", "api_error"),
    503: ("server_error", "overloaded_error"),
}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def is_anthropic(path: str) -> bool:
    return path.startswith("/v1/messages")


def error_body(path: str, status: int, message: str, *, param: str | None = None, code: str | None = None) -> dict:
    openai_type, anthropic_type = _TYPES.get(status, _TYPES[500] if status >= 500 else _TYPES[400])
    if is_anthropic(path):
        return {"type": "error", "error": {"type": anthropic_type, "message": message}}
    return {"error": {"message": message, "type": openai_type, "param": param, "code": code}}


def error_response(request: Request, exc: APIError) -> JSONResponse:
    headers = {"retry-after": "1"} if exc.status == 429 else None
    return JSONResponse(
        error_body(request.url.path, exc.status, exc.message, param=exc.param, code=exc.code),
        status_code=exc.status,
        headers=headers,
    )


def describe_validation(errors) -> tuple[str, str | None]:
    """One readable line for pydantic's errors, and the field it names first."""
    parts, first = [], None
    for err in errors[:5]:
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        where = ".".join(loc)
        first = first or where or None
        if err.get("type") == "json_invalid":
            parts.append(f"the body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})")
        elif err.get("type") == "extra_forbidden":
            parts.append(f"{where}: not a supported field")
        elif err.get("type") == "missing":
            parts.append(f"{where}: required")
        else:
            parts.append(f"{where}: {err.get('msg')}" if where else str(err.get("msg")))
    return "; ".join(parts), first


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        message, param = describe_validation(exc.errors())
        return error_response(request, APIError(400, message, param=param))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException):
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404:
            message = f"no route {request.method} {request.url.path}"
        return error_response(request, APIError(exc.status_code, message))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("%s %s failed", request.method, request.url.path)
        return error_response(request, APIError(500, f"internal error ({type(exc).__name__}); see the server log"))
