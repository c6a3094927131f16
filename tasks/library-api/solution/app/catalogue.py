"""Thread-safe in-memory book catalogue with ISBN uniqueness and loan state."""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, replace
from typing import Any, Optional


class CatalogueError(Exception):
    """Base of the domain errors the HTTP layer maps to status codes."""


class BookNotFound(CatalogueError):
    pass


class IsbnTaken(CatalogueError):
    pass


class LoanConflict(CatalogueError):
    pass


class NotBorrower(CatalogueError):
    pass


@dataclass
class Book:
    id: int
    title: str
    author: str
    isbn: str
    genre: str
    published_year: Optional[int]
    borrowed_by: Optional[str] = None

    @property
    def available(self) -> bool:
        return self.borrowed_by is None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "available": self.available}


@dataclass(frozen=True)
class BookQuery:
    author: Optional[str] = None
    genre: Optional[str] = None
    available: Optional[bool] = None
    q: Optional[str] = None

    def matches(self, book: Book) -> bool:
        # casefold gives case-insensitive comparison that also handles non-ASCII letters
        if self.author is not None and book.author.casefold() != self.author.casefold():
            return False
        if self.genre is not None and book.genre.casefold() != self.genre.casefold():
            return False
        if self.available is not None and book.available != self.available:
            return False
        if self.q is not None and self.q.casefold() not in book.title.casefold():
            return False
        return True


class Catalogue:
    """All methods hold one lock and return copies, so callers never see a half-applied change."""

    def __init__(self) -> None:
        self._books: dict[int, Book] = {}
        self._by_isbn: dict[str, int] = {}
        self._next_id = 1
        self._lock = threading.Lock()

    def _get(self, book_id: int) -> Book:
        book = self._books.get(book_id)
        if book is None:
            raise BookNotFound(f"book {book_id} not found")
        return book

    def _claim_isbn(self, isbn: str, book_id: int) -> None:
        owner = self._by_isbn.get(isbn)
        if owner is not None and owner != book_id:
            raise IsbnTaken(f"isbn {isbn} is already used by book {owner}")

    def create(self, fields: dict[str, Any]) -> Book:
        with self._lock:
            self._claim_isbn(fields["isbn"], -1)
            book = Book(id=self._next_id, **fields)
            self._next_id += 1
            self._books[book.id] = book
            self._by_isbn[book.isbn] = book.id
            return replace(book)

    def get(self, book_id: int) -> Book:
        with self._lock:
            return replace(self._get(book_id))

    def update(self, book_id: int, changes: dict[str, Any]) -> Book:
        """Apply field changes (PUT passes every field, PATCH only the sent ones)."""
        with self._lock:
            book = self._get(book_id)
            new_isbn = changes.get("isbn", book.isbn)
            self._claim_isbn(new_isbn, book_id)
            if new_isbn != book.isbn:
                del self._by_isbn[book.isbn]
                self._by_isbn[new_isbn] = book_id
            for name, value in changes.items():
                setattr(book, name, value)
            return replace(book)

    def delete(self, book_id: int) -> None:
        with self._lock:
            book = self._get(book_id)
            if not book.available:
                raise LoanConflict(f"book {book_id} is on loan and cannot be deleted")
            del self._books[book_id]
            del self._by_isbn[book.isbn]

    def search(self, query: BookQuery, offset: int, limit: int) -> tuple[list[Book], int]:
        with self._lock:
            # dicts keep insertion order and ids only grow, so this is id order
            matches = [replace(b) for b in self._books.values() if query.matches(b)]
        return matches[offset : offset + limit], len(matches)

    def loan(self, book_id: int, username: str) -> Book:
        with self._lock:
            book = self._get(book_id)
            if not book.available:
                raise LoanConflict(f"book {book_id} is already on loan")
            book.borrowed_by = username
            return replace(book)

    def give_back(self, book_id: int, username: str, may_return_any: bool) -> Book:
        with self._lock:
            book = self._get(book_id)
            if book.available:
                raise LoanConflict(f"book {book_id} is not on loan")
            if book.borrowed_by != username and not may_return_any:
                raise NotBorrower(f"book {book_id} is on loan to another user")
            book.borrowed_by = None
            return replace(book)

    def loans_of(self, username: str) -> list[Book]:
        with self._lock:
            return [replace(b) for b in self._books.values() if b.borrowed_by == username]
