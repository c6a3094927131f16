"""HTTP layer of Word Duel: request validation, routes and the error envelope."""
from __future__ import annotations

import re
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from game import STATUSES, GameError, Store

PORT = 5050
PLAYER_RE = re.compile(r"[A-Za-z0-9_-]{1,32}")
SECRET_RE = re.compile(r"[A-Za-z]{3,12}")
WORD_RE = re.compile(r"[A-Za-z]{1,32}")
LETTER_RE = re.compile(r"[A-Za-z]")

app = Flask(__name__)
store = Store()


def invalid(message: str) -> GameError:
    return GameError(400, "VALIDATION_ERROR", message)


def error_response(status: int, code: str, message: str) -> Response:
    resp = jsonify({"error": {"code": code, "message": message}})
    resp.status_code = status
    return resp


@app.errorhandler(GameError)
def handle_game_error(exc: GameError) -> Response:
    return error_response(exc.status, exc.code, exc.message)


# Werkzeug's own errors (unknown route, wrong method, ...) get the envelope too.
HTTP_CODES = {400: "VALIDATION_ERROR", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}


@app.errorhandler(HTTPException)
def handle_http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    resp = error_response(status, HTTP_CODES.get(status, "INTERNAL_ERROR" if status >= 500 else "HTTP_ERROR"),
                          exc.description or exc.name)
    if status == 405:
        allow = dict(exc.get_headers()).get("Allow")
        if allow:
            resp.headers["Allow"] = allow
    return resp


@app.errorhandler(Exception)
def handle_unexpected(exc: Exception) -> Response:
    return error_response(500, "INTERNAL_ERROR", "internal server error")


def json_object() -> dict[str, Any]:
    # Parse regardless of Content-Type, as the README promises.
    body = request.get_json(force=True, silent=True)
    if not isinstance(body, dict):
        raise invalid("request body must be a JSON object")
    return body


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def query_int(name: str, default: int, low: int, high: int | None) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    if not re.fullmatch(r"[0-9]{1,9}", raw):
        raise invalid(f"'{name}' must be an integer")
    value = int(raw)
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise invalid(f"'{name}' must be {bound}")
    return value


@app.get("/health")
def health() -> Response:
    return jsonify({"status": "ok"})


@app.post("/api/v1/games")
def create_game() -> tuple[Response, int]:
    body = json_object()
    player = body.get("player")
    if not isinstance(player, str) or not PLAYER_RE.fullmatch(player):
        raise invalid("'player' must be 1-32 characters of letters, digits, '_' or '-'")
    secret = body.get("secret")
    if secret is not None:
        if not isinstance(secret, str) or not SECRET_RE.fullmatch(secret):
            raise invalid("'secret' must be 3-12 letters a-z")
        secret = secret.lower()
    max_wrong = body.get("max_wrong")
    if max_wrong is None:
        max_wrong = 6
    elif not is_int(max_wrong) or not 1 <= max_wrong <= 10:
        raise invalid("'max_wrong' must be an integer between 1 and 10")
    return jsonify(store.create(player, secret, max_wrong)), 201


@app.get("/api/v1/games")
def list_games() -> Response:
    player = request.args.get("player")
    status = request.args.get("status")
    if status is not None and status not in STATUSES:
        raise invalid("'status' must be one of: " + ", ".join(sorted(STATUSES)))
    limit = query_int("limit", 20, 1, 100)
    offset = query_int("offset", 0, 0, None)
    games = store.list(player, status)
    return jsonify({"items": games[offset:offset + limit], "total": len(games),
                    "limit": limit, "offset": offset})


@app.get("/api/v1/games/<game_id>")
def get_game(game_id: str) -> Response:
    return jsonify(store.get(game_id))


@app.post("/api/v1/games/<game_id>/guesses")
def guess(game_id: str) -> Response:
    store.ensure_exists(game_id)  # 404 takes precedence over body validation
    body = json_object()
    letter, word = body.get("letter"), body.get("word")
    if (letter is None) == (word is None):
        raise invalid("provide exactly one of 'letter' or 'word'")
    if letter is not None:
        if not isinstance(letter, str) or not LETTER_RE.fullmatch(letter):
            raise invalid("'letter' must be a single letter a-z")
        return jsonify(store.guess(game_id, letter.lower(), None))
    if not isinstance(word, str) or not WORD_RE.fullmatch(word):
        raise invalid("'word' must be 1-32 letters a-z")
    return jsonify(store.guess(game_id, None, word.lower()))


@app.post("/api/v1/games/<game_id>/resign")
def resign(game_id: str) -> Response:
    return jsonify(store.resign(game_id))


@app.delete("/api/v1/games/<game_id>")
def delete_game(game_id: str) -> tuple[str, int]:
    store.delete(game_id)
    return "", 204


@app.get("/api/v1/leaderboard")
def leaderboard() -> Response:
    return jsonify({"players": store.leaderboard()})


if __name__ == "__main__":
    app.run(host="0.0.0.0", port=PORT, threaded=True, debug=False)
