"""HTTP layer of the library catalogue API."""
from __future__ import annotations

from typing import Literal, Optional

from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response, status
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .accounts import User, authenticate
from .catalogue import (
    Book,
    BookNotFound,
    BookQuery,
    Catalogue,
    CatalogueError,
    IsbnTaken,
    LoanConflict,
    NotBorrower,
)
from .models import BookIn, BookOut, BookPage, BookPatch, LoanList, LoginRequest, Me, TokenResponse
from .security import ACCESS, access, check_access, current_token, current_user, librarian, tokens

app = FastAPI(title="Library Catalogue API", version="1.0.0")
catalogue = Catalogue()
API = "/api/v1"

_DOMAIN_STATUS: dict[type[CatalogueError], int] = {
    BookNotFound: status.HTTP_404_NOT_FOUND,
    IsbnTaken: status.HTTP_409_CONFLICT,
    LoanConflict: status.HTTP_409_CONFLICT,
    NotBorrower: status.HTTP_403_FORBIDDEN,
}


@app.exception_handler(CatalogueError)
async def on_domain_error(request: Request, exc: CatalogueError) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=_DOMAIN_STATUS[type(exc)])


@app.exception_handler(RequestValidationError)
async def on_validation_error(request: Request, exc: RequestValidationError) -> Response:
    # FastAPI rejects malformed JSON before running dependencies; auth must still win over 422.
    level = ACCESS.get(request.scope.get("endpoint"), "public")
    denied = check_access(request.headers.get("authorization"), level)
    if denied is not None:
        return JSONResponse({"detail": denied.detail}, status_code=denied.status_code, headers=denied.headers)
    return await request_validation_exception_handler(request, exc)


def _out(book: Book) -> BookOut:
    return BookOut.model_validate(book.to_dict())


@app.get("/health")
@access("public")
def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post(f"{API}/auth/token", response_model=TokenResponse)
@access("public")
def login(body: LoginRequest) -> TokenResponse:
    user = authenticate(body.username, body.password)
    if user is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "invalid username or password")
    return TokenResponse(access_token=tokens.issue(user), role=user.role)


@app.get(f"{API}/auth/me", response_model=Me)
@access("user")
def me(user: User = Depends(current_user)) -> Me:
    return Me(username=user.username, role=user.role)


@app.post(f"{API}/auth/logout", status_code=status.HTTP_204_NO_CONTENT)
@access("user")
def logout(token: str = Depends(current_token)) -> Response:
    tokens.revoke(token)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@app.get(f"{API}/books", response_model=BookPage)
@access("user")
def list_books(
    _: User = Depends(current_user),
    page: int = Query(1, ge=1),
    page_size: int = Query(20, ge=1, le=100),
    author: Optional[str] = None,
    genre: Optional[str] = None,
    # only the literal words are accepted (FastAPI's bool would also take yes/1/on)
    available: Optional[Literal["true", "false"]] = None,
    q: Optional[str] = None,
) -> BookPage:
    query = BookQuery(
        author=author,
        genre=genre,
        available=None if available is None else available == "true",
        q=q,
    )
    items, total = catalogue.search(query, (page - 1) * page_size, page_size)
    return BookPage(items=[_out(b) for b in items], total=total, page=page, page_size=page_size)


@app.post(f"{API}/books", response_model=BookOut, status_code=status.HTTP_201_CREATED)
@access("librarian")
def create_book(body: BookIn, _: User = Depends(librarian)) -> BookOut:
    return _out(catalogue.create(body.model_dump()))


@app.get(f"{API}/books/{{book_id}}", response_model=BookOut)
@access("user")
def get_book(book_id: int, _: User = Depends(current_user)) -> BookOut:
    return _out(catalogue.get(book_id))


@app.put(f"{API}/books/{{book_id}}", response_model=BookOut)
@access("librarian")
def replace_book(book_id: int, body: BookIn, _: User = Depends(librarian)) -> BookOut:
    return _out(catalogue.update(book_id, body.model_dump()))


@app.patch(f"{API}/books/{{book_id}}", response_model=BookOut)
@access("librarian")
def patch_book(book_id: int, body: BookPatch, _: User = Depends(librarian)) -> BookOut:
    return _out(catalogue.update(book_id, body.changes()))


@app.delete(f"{API}/books/{{book_id}}", status_code=status.HTTP_204_NO_CONTENT)
@access("librarian")
def delete_book(book_id: int, _: User = Depends(librarian)) -> Response:
    catalogue.delete(book_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@app.post(f"{API}/books/{{book_id}}/loan", response_model=BookOut)
@access("user")
def loan_book(book_id: int, user: User = Depends(current_user)) -> BookOut:
    return _out(catalogue.loan(book_id, user.username))


@app.post(f"{API}/books/{{book_id}}/return", response_model=BookOut)
@access("user")
def return_book(book_id: int, user: User = Depends(current_user)) -> BookOut:
    return _out(catalogue.give_back(book_id, user.username, user.role == "librarian"))


@app.get(f"{API}/users/me/loans", response_model=LoanList)
@access("user")
def my_loans(user: User = Depends(current_user)) -> LoanList:
    items = [_out(b) for b in catalogue.loans_of(user.username)]
    return LoanList(items=items, total=len(items))
