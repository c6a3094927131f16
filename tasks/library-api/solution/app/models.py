"""Request and response schemas (pydantic v2)."""
from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

_ISBN_RE = re.compile(r"[0-9]{13}")

Title = Annotated[StrictStr, Field(min_length=1, max_length=200)]
Author = Annotated[StrictStr, Field(min_length=1, max_length=100)]
Genre = Annotated[StrictStr, Field(min_length=1, max_length=50)]
Isbn = Annotated[StrictStr, Field(min_length=13, max_length=13)]
# strict: the spec asks for a JSON integer, so "1999", 1999.0 and true are rejected
Year = Annotated[int, Field(strict=True, ge=1000, le=2100)]


def isbn13_is_valid(isbn: str) -> bool:
    """True for 13 ASCII digits whose last digit is the ISBN-13 check digit."""
    if not _ISBN_RE.fullmatch(isbn):
        return False
    total = sum(int(d) * (1 if i % 2 == 0 else 3) for i, d in enumerate(isbn[:12]))
    return int(isbn[12]) == (10 - total % 10) % 10


def _check_isbn(value: Optional[str]) -> Optional[str]:
    if value is not None and not isbn13_is_valid(value):
        raise ValueError("isbn must be 13 digits with a valid ISBN-13 check digit")
    return value


class LoginRequest(BaseModel):
    username: StrictStr
    password: StrictStr


class TokenResponse(BaseModel):
    access_token: str
    token_type: Literal["bearer"] = "bearer"
    role: str


class Me(BaseModel):
    username: str
    role: str


class BookIn(BaseModel):
    """Body of POST and PUT: unknown and read-only fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    title: Title
    author: Author
    isbn: Isbn
    genre: Genre
    published_year: Optional[Year] = None

    _isbn = field_validator("isbn")(_check_isbn)


class BookPatch(BaseModel):
    """Body of PATCH: only the fields present in the body are applied."""

    model_config = ConfigDict(extra="ignore")

    title: Optional[Title] = None
    author: Optional[Author] = None
    isbn: Optional[Isbn] = None
    genre: Optional[Genre] = None
    published_year: Optional[Year] = None

    _isbn = field_validator("isbn")(_check_isbn)

    @model_validator(mode="after")
    def _no_null_required(self) -> BookPatch:
        # Only published_year is nullable; null elsewhere would erase a required field.
        for name in ("title", "author", "isbn", "genre"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"{name} must not be null")
        return self

    def changes(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.model_fields_set}


class BookOut(BaseModel):
    id: int
    title: str
    author: str
    isbn: str
    genre: str
    published_year: Optional[int]
    available: bool
    borrowed_by: Optional[str]


class BookPage(BaseModel):
    items: list[BookOut]
    total: int
    page: int
    page_size: int


class LoanList(BaseModel):
    items: list[BookOut]
    total: int
