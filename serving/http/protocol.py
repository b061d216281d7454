"""What every endpoint family's protocol shares (DESIGN.md §9): the request body's base (unknown fields
ignored, never trusted; lone surrogates refused), the response body's base, and the one error shape
every route documents. Each family's own request and response models live beside its routes
(serving/http/routers/<family>/protocol.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"


class RequestBody(BaseModel):
    # Unknown fields are ignored, never trusted: a `tenant_id` or `groups` in a body changes nothing.
    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="after")
    def _utf8_only(self) -> "RequestBody":
        # JSON may spell a lone surrogate ("\ud800"); such a string cannot be stored or hashed as
        # UTF-8, so it is refused here with a 422 instead of failing deep inside a stage.
        for name, value in self:
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str) and not _utf8(text):
                    raise ValueError(f"{name} is not valid Unicode text (a lone surrogate)")
        return self


class ResponseBody(BaseModel):
    """A response body: built from what a service returned, every key of it declared (a key the model
    does not name would be dropped from the response, so a new key needs a field here)."""


class ErrorDetail(BaseModel):
    code: str = Field(..., description="Machine-readable; each error class of citadel/errors.py names its code and status.")
    message: str
    request_id: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


ERRORS = {status: {"model": ErrorResponse} for status in (400, 401, 403, 404, 409, 413, 422, 429, 503, 504)}
