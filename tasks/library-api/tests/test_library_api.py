"""Black-box tests of the library catalogue API described in the task README.

Every test creates its own books (unique authors/ISBNs) and never assumes an empty store, so the
suite can run in any order and repeatedly against one running service.
"""
from __future__ import annotations

import os
import uuid
from typing import Any

import requests

BASE_URL = os.environ.get("SERVICE_BASE_URL", "http://localhost:8081").rstrip("/")
API = f"{BASE_URL}/api/v1"
TIMEOUT = 5  # seconds: a dead service must fail fast

PASSWORDS = {"librarian": "shelf-keeper-42", "alice": "alice-reads-1", "bob": "bob-reads-2"}
_token_cache: dict[str, str] = {}


# ---------------------------------------------------------------- helpers (no network at import)

def call(method: str, path: str, user: str | None = None, **kwargs: Any) -> requests.Response:
    headers = dict(kwargs.pop("headers", {}))
    if user is not None:
        headers["Authorization"] = f"Bearer {token(user)}"
    return requests.request(method, f"{API}{path}", headers=headers, timeout=TIMEOUT, **kwargs)


def login(username: str, password: str | None = None) -> requests.Response:
    body = {"username": username, "password": PASSWORDS[username] if password is None else password}
    return requests.post(f"{API}/auth/token", json=body, timeout=TIMEOUT)


def fresh_token(username: str) -> str:
    resp = login(username)
    assert resp.status_code == 200, resp.text
    return resp.json()["access_token"]


def token(username: str) -> str:
    if username not in _token_cache:
        _token_cache[username] = fresh_token(username)
    return _token_cache[username]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def make_isbn() -> str:
    """A random valid ISBN-13 (978 prefix + 9 random digits + check digit)."""
    body = "978" + f"{uuid.uuid4().int % 10**9:09d}"
    total = sum(int(d) * (1 if i % 2 == 0 else 3) for i, d in enumerate(body))
    return body + str((10 - total % 10) % 10)


def book_payload(**overrides: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "title": unique("Title"),
        "author": unique("Author"),
        "isbn": make_isbn(),
        "genre": "Fiction",
        "published_year": 1999,
    }
    payload.update(overrides)
    return payload


def create_book(**overrides: Any) -> dict[str, Any]:
    resp = call("POST", "/books", "librarian", json=book_payload(**overrides))
    assert resp.status_code == 201, resp.text
    return resp.json()


BOOK_FIELDS = {"id", "title", "author", "isbn", "genre", "published_year", "available", "borrowed_by"}


def assert_error(resp: requests.Response, status: int) -> None:
    assert resp.status_code == status, (resp.status_code, resp.text)
    body = resp.json()
    assert isinstance(body, dict) and "detail" in body
    if status != 422:
        assert isinstance(body["detail"], str)


# ---------------------------------------------------------------- health and auth

def test_health_is_public_and_ok() -> None:
    resp = requests.get(f"{BASE_URL}/health", timeout=TIMEOUT)
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


def test_login_returns_distinct_bearer_tokens_with_role() -> None:
    first = login("librarian")
    second = login("librarian")
    assert first.status_code == 200 and second.status_code == 200
    a, b = first.json(), second.json()
    assert a["token_type"] == "bearer" and a["role"] == "librarian"
    assert isinstance(a["access_token"], str) and a["access_token"]
    assert a["access_token"] != b["access_token"]
    reader = login("bob")
    assert reader.status_code == 200 and reader.json()["role"] == "reader"


def test_login_rejects_bad_credentials_with_401() -> None:
    assert_error(login("alice", "not-the-password"), 401)
    resp = requests.post(f"{API}/auth/token", json={"username": unique("nobody"), "password": "x"}, timeout=TIMEOUT)
    assert_error(resp, 401)


def test_login_validation_errors_are_422() -> None:
    resp = requests.post(f"{API}/auth/token", json={"username": "alice"}, timeout=TIMEOUT)
    assert_error(resp, 422)
    resp = requests.post(f"{API}/auth/token", json={"username": "alice", "password": 123}, timeout=TIMEOUT)
    assert_error(resp, 422)


def test_me_reports_username_and_role() -> None:
    for username, role in (("librarian", "librarian"), ("alice", "reader")):
        resp = call("GET", "/auth/me", username)
        assert resp.status_code == 200
        assert resp.json() == {"username": username, "role": role}


def test_protected_endpoints_require_a_valid_token() -> None:
    assert_error(requests.get(f"{API}/books", timeout=TIMEOUT), 401)
    assert_error(requests.get(f"{API}/auth/me", timeout=TIMEOUT), 401)
    bogus = {"Authorization": f"Bearer {unique('bogus')}"}
    assert_error(requests.get(f"{API}/books", headers=bogus, timeout=TIMEOUT), 401)
    basic = {"Authorization": "Basic YWxpY2U6YWxpY2UtcmVhZHMtMQ=="}
    assert_error(requests.get(f"{API}/books", headers=basic, timeout=TIMEOUT), 401)
    # auth comes before validation: no token and an invalid body is still 401
    assert_error(requests.post(f"{API}/books", json={"title": ""}, timeout=TIMEOUT), 401)


def test_logout_revokes_only_the_token_used() -> None:
    doomed, survivor = fresh_token("alice"), fresh_token("alice")
    resp = requests.post(f"{API}/auth/logout", headers={"Authorization": f"Bearer {doomed}"}, timeout=TIMEOUT)
    assert resp.status_code == 204
    assert resp.content == b""
    revoked = requests.get(f"{API}/auth/me", headers={"Authorization": f"Bearer {doomed}"}, timeout=TIMEOUT)
    assert_error(revoked, 401)
    still = requests.get(f"{API}/auth/me", headers={"Authorization": f"Bearer {survivor}"}, timeout=TIMEOUT)
    assert still.status_code == 200 and still.json()["username"] == "alice"


# ---------------------------------------------------------------- create / read

def test_create_book_as_librarian() -> None:
    payload = book_payload(published_year=1965)
    sent = dict(payload, id=987654321, available=False, borrowed_by="alice")  # read-only: ignored
    resp = call("POST", "/books", "librarian", json=sent)
    assert resp.status_code == 201, resp.text
    book = resp.json()
    assert set(book) == BOOK_FIELDS
    assert isinstance(book["id"], int) and book["id"] > 0 and book["id"] != 987654321
    for key, value in payload.items():
        assert book[key] == value
    assert book["available"] is True and book["borrowed_by"] is None
    fetched = call("GET", f"/books/{book['id']}", "bob")
    assert fetched.status_code == 200 and fetched.json() == book


def test_create_book_without_year_defaults_to_null_and_ids_grow() -> None:
    payload = book_payload()
    del payload["published_year"]
    first = call("POST", "/books", "librarian", json=payload)
    assert first.status_code == 201
    assert first.json()["published_year"] is None
    second = create_book()
    assert second["id"] > first.json()["id"]


def test_create_book_forbidden_for_reader() -> None:
    payload = book_payload()
    assert_error(call("POST", "/books", "alice", json=payload), 403)
    # role check comes before body validation
    assert_error(call("POST", "/books", "alice", json={"title": ""}), 403)
    listed = call("GET", "/books", "alice", params={"author": payload["author"]})
    assert listed.json()["total"] == 0


def test_create_book_validation_errors() -> None:
    bad_bodies = [
        {k: v for k, v in book_payload().items() if k != "title"},   # missing title
        book_payload(title=""),
        book_payload(title="x" * 201),
        book_payload(author="a" * 101),
        book_payload(genre=""),
        book_payload(isbn="9780306406158"),                        # wrong check digit
        book_payload(isbn="978030640615"),                         # 12 digits
        book_payload(isbn="978-0-306-40615-7"),
        book_payload(published_year=999),
        book_payload(published_year=2101),
        book_payload(title=12345),
    ]
    for body in bad_bodies:
        assert_error(call("POST", "/books", "librarian", json=body), 422)
    # boundary values are accepted
    ok = create_book(title="t" * 200, author="a" * 100, genre="g" * 50, published_year=1000)
    assert ok["published_year"] == 1000
    assert create_book(published_year=2100)["published_year"] == 2100


def test_duplicate_isbn_is_409() -> None:
    first = create_book()
    resp = call("POST", "/books", "librarian", json=book_payload(isbn=first["isbn"]))
    assert_error(resp, 409)


def test_get_unknown_or_invalid_id() -> None:
    assert_error(call("GET", "/books/999999999", "alice"), 404)
    assert_error(call("GET", "/books/0", "alice"), 404)
    assert_error(call("GET", "/books/-3", "alice"), 404)
    assert_error(call("GET", "/books/not-a-number", "alice"), 422)


# ---------------------------------------------------------------- update / delete

def test_put_replaces_details_and_clears_missing_year() -> None:
    book = create_book(published_year=1950)
    new = book_payload(genre="History")
    del new["published_year"]
    resp = call("PUT", f"/books/{book['id']}", "librarian", json=new)
    assert resp.status_code == 200, resp.text
    updated = resp.json()
    assert updated["id"] == book["id"]
    for key, value in new.items():
        assert updated[key] == value
    assert updated["published_year"] is None
    assert call("GET", f"/books/{book['id']}", "alice").json() == updated
    # keeping its own ISBN is fine
    again = call("PUT", f"/books/{book['id']}", "librarian", json=dict(new, title="Second edition"))
    assert again.status_code == 200 and again.json()["title"] == "Second edition"
    # the replaced ISBN is free again for another book
    assert create_book(isbn=book["isbn"])["isbn"] == book["isbn"]


def test_put_errors() -> None:
    book, other = create_book(), create_book()
    assert_error(call("PUT", f"/books/{book['id']}", "bob", json=book_payload()), 403)
    assert_error(call("PUT", "/books/999999999", "librarian", json=book_payload()), 404)
    incomplete = {"title": "Only a title"}
    assert_error(call("PUT", f"/books/{book['id']}", "librarian", json=incomplete), 422)
    clash = book_payload(isbn=other["isbn"])
    assert_error(call("PUT", f"/books/{book['id']}", "librarian", json=clash), 409)
    assert call("GET", f"/books/{book['id']}", "alice").json() == book


def test_patch_changes_only_sent_fields() -> None:
    book = create_book(published_year=2001)
    resp = call("PATCH", f"/books/{book['id']}", "librarian", json={"title": "Renamed"})
    assert resp.status_code == 200, resp.text
    assert resp.json() == dict(book, title="Renamed")
    cleared = call("PATCH", f"/books/{book['id']}", "librarian", json={"published_year": None})
    assert cleared.status_code == 200 and cleared.json()["published_year"] is None
    unchanged = call("PATCH", f"/books/{book['id']}", "librarian", json={})
    assert unchanged.status_code == 200
    assert unchanged.json() == dict(book, title="Renamed", published_year=None)


def test_patch_errors() -> None:
    book, other = create_book(), create_book()
    assert_error(call("PATCH", f"/books/{book['id']}", "alice", json={"title": "x"}), 403)
    assert_error(call("PATCH", "/books/999999999", "librarian", json={"title": "x"}), 404)
    assert_error(call("PATCH", f"/books/{book['id']}", "librarian", json={"title": None}), 422)
    assert_error(call("PATCH", f"/books/{book['id']}", "librarian", json={"isbn": "123"}), 422)
    assert_error(call("PATCH", f"/books/{book['id']}", "librarian", json={"isbn": other["isbn"]}), 409)
    same = call("PATCH", f"/books/{book['id']}", "librarian", json={"isbn": book["isbn"]})
    assert same.status_code == 200
    assert call("GET", f"/books/{book['id']}", "alice").json() == book
    fresh_isbn = make_isbn()
    moved = call("PATCH", f"/books/{book['id']}", "librarian", json={"isbn": fresh_isbn})
    assert moved.status_code == 200 and moved.json()["isbn"] == fresh_isbn
    assert create_book(isbn=book["isbn"])["isbn"] == book["isbn"]
    assert_error(call("POST", "/books", "librarian", json=book_payload(isbn=fresh_isbn)), 409)


def test_delete_book_then_404_and_isbn_reusable() -> None:
    book = create_book()
    assert_error(call("DELETE", f"/books/{book['id']}", "alice"), 403)
    resp = call("DELETE", f"/books/{book['id']}", "librarian")
    assert resp.status_code == 204 and resp.content == b""
    assert_error(call("GET", f"/books/{book['id']}", "alice"), 404)
    assert_error(call("DELETE", f"/books/{book['id']}", "librarian"), 404)
    reborn = create_book(isbn=book["isbn"])
    assert reborn["id"] != book["id"]


# ---------------------------------------------------------------- listing

def test_list_pagination_by_id() -> None:
    author = unique("Paged Author")
    ids = [create_book(author=author)["id"] for _ in range(5)]
    default = call("GET", "/books", "alice", params={"author": author})
    assert default.status_code == 200
    body = default.json()
    assert body["page"] == 1 and body["page_size"] == 20 and body["total"] == 5
    assert [b["id"] for b in body["items"]] == ids
    assert all(set(b) == BOOK_FIELDS for b in body["items"])
    pages = []
    for page in (1, 2, 3):
        resp = call("GET", "/books", "alice", params={"author": author, "page": page, "page_size": 2})
        data = resp.json()
        assert data["total"] == 5 and data["page"] == page and data["page_size"] == 2
        pages.append([b["id"] for b in data["items"]])
    assert pages == [ids[0:2], ids[2:4], ids[4:5]]
    past = call("GET", "/books", "alice", params={"author": author, "page": 4, "page_size": 2}).json()
    assert past["items"] == [] and past["total"] == 5


def test_list_parameter_bounds() -> None:
    for params in ({"page": 0}, {"page_size": 0}, {"page_size": 101}, {"page": "x"}, {"available": "maybe"}):
        assert_error(call("GET", "/books", "alice", params=params), 422)
    ok = call("GET", "/books", "alice", params={"page_size": 100, "author": unique("nobody")})
    assert ok.status_code == 200 and ok.json()["page_size"] == 100 and ok.json()["total"] == 0


def test_list_filters_author_genre_and_title_substring() -> None:
    author = unique("Filter Author")
    marker = uuid.uuid4().hex[:10]
    a = create_book(author=author, genre="Mystery", title=f"The {marker} Affair")
    b = create_book(author=author, genre="Poetry", title=f"Songs of {marker.upper()}")
    c = create_book(author=author, genre="Mystery", title="Unrelated")
    create_book(author=author + "x", genre="Mystery", title=f"{marker} elsewhere")

    def ids(**params: Any) -> list[int]:
        resp = call("GET", "/books", "bob", params=params)
        assert resp.status_code == 200, resp.text
        data = resp.json()
        assert data["total"] == len(data["items"])
        return [x["id"] for x in data["items"]]

    assert ids(author=author.upper()) == [a["id"], b["id"], c["id"]]  # case-insensitive, whole value
    assert ids(author=author[:-2]) == []                                # not a substring match
    assert ids(author=author, genre="mystery") == [a["id"], c["id"]]
    assert ids(author=author, q=marker.upper()) == [a["id"], b["id"]]
    assert ids(author=author, genre="MYSTERY", q=marker) == [a["id"]]


def test_list_filter_available() -> None:
    author = unique("Loan Filter")
    on_loan, on_shelf = create_book(author=author), create_book(author=author)
    assert call("POST", f"/books/{on_loan['id']}/loan", "bob").status_code == 200
    try:
        out = call("GET", "/books", "alice", params={"author": author, "available": "false"}).json()
        assert [b["id"] for b in out["items"]] == [on_loan["id"]]
        assert out["items"][0]["available"] is False and out["items"][0]["borrowed_by"] == "bob"
        shelf = call("GET", "/books", "alice", params={"author": author, "available": "true"}).json()
        assert [b["id"] for b in shelf["items"]] == [on_shelf["id"]] and shelf["total"] == 1
    finally:
        call("POST", f"/books/{on_loan['id']}/return", "bob")


# ---------------------------------------------------------------- loans

def test_loan_and_return_cycle() -> None:
    book = create_book()
    loaned = call("POST", f"/books/{book['id']}/loan", "alice")
    assert loaned.status_code == 200, loaned.text
    assert loaned.json() == dict(book, available=False, borrowed_by="alice")
    assert call("GET", f"/books/{book['id']}", "bob").json()["borrowed_by"] == "alice"
    assert_error(call("POST", f"/books/{book['id']}/loan", "bob"), 409)
    assert_error(call("POST", f"/books/{book['id']}/loan", "alice"), 409)
    assert_error(call("POST", f"/books/{book['id']}/return", "bob"), 403)
    returned = call("POST", f"/books/{book['id']}/return", "alice")
    assert returned.status_code == 200
    assert returned.json() == dict(book, available=True, borrowed_by=None)
    assert_error(call("POST", f"/books/{book['id']}/return", "alice"), 409)
    assert_error(call("POST", f"/books/{book['id']}/return", "bob"), 409)


def test_librarian_can_borrow_and_return_any_loan() -> None:
    book = create_book()
    assert call("POST", f"/books/{book['id']}/loan", "bob").status_code == 200
    back = call("POST", f"/books/{book['id']}/return", "librarian")
    assert back.status_code == 200 and back.json()["available"] is True
    mine = call("POST", f"/books/{book['id']}/loan", "librarian")
    assert mine.status_code == 200 and mine.json()["borrowed_by"] == "librarian"
    assert call("POST", f"/books/{book['id']}/return", "librarian").status_code == 200


def test_book_on_loan_cannot_be_deleted_and_updates_keep_loan() -> None:
    book = create_book()
    assert call("POST", f"/books/{book['id']}/loan", "alice").status_code == 200
    assert_error(call("DELETE", f"/books/{book['id']}", "librarian"), 409)
    patched = call("PATCH", f"/books/{book['id']}", "librarian", json={"genre": "Reference"}).json()
    assert patched["available"] is False and patched["borrowed_by"] == "alice"
    replaced = call("PUT", f"/books/{book['id']}", "librarian", json=book_payload()).json()
    assert replaced["available"] is False and replaced["borrowed_by"] == "alice"
    assert call("POST", f"/books/{book['id']}/return", "alice").status_code == 200
    assert call("DELETE", f"/books/{book['id']}", "librarian").status_code == 204


def test_loan_errors_for_missing_book_and_missing_token() -> None:
    assert_error(call("POST", "/books/999999999/loan", "alice"), 404)
    assert_error(call("POST", "/books/999999999/return", "alice"), 404)
    assert_error(call("POST", "/books/abc/loan", "alice"), 422)
    book = create_book()
    assert_error(requests.post(f"{API}/books/{book['id']}/loan", timeout=TIMEOUT), 401)
    assert call("GET", f"/books/{book['id']}", "alice").json()["available"] is True


def test_my_loans_lists_only_the_callers_current_loans() -> None:
    mine_a, mine_b, theirs = create_book(), create_book(), create_book()
    for book, user in ((mine_a, "alice"), (mine_b, "alice"), (theirs, "bob")):
        assert call("POST", f"/books/{book['id']}/loan", user).status_code == 200
    try:
        data = call("GET", "/users/me/loans", "alice").json()
        assert data["total"] == len(data["items"])
        ids = [b["id"] for b in data["items"]]
        assert ids == sorted(ids)
        assert mine_a["id"] in ids and mine_b["id"] in ids and theirs["id"] not in ids
        assert all(b["borrowed_by"] == "alice" for b in data["items"])
        assert call("POST", f"/books/{mine_a['id']}/return", "alice").status_code == 200
        after = [b["id"] for b in call("GET", "/users/me/loans", "alice").json()["items"]]
        assert mine_a["id"] not in after and mine_b["id"] in after
        assert_error(requests.get(f"{API}/users/me/loans", timeout=TIMEOUT), 401)
    finally:
        call("POST", f"/books/{mine_b['id']}/return", "alice")
        call("POST", f"/books/{theirs['id']}/return", "bob")
