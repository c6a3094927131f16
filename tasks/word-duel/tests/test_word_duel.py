"""Golden black-box tests for the Word Duel service (README is the contract)."""
from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
import requests

BASE_URL = os.environ.get("SERVICE_BASE_URL", "http://localhost:5050").rstrip("/")
API = BASE_URL + "/api/v1"
TIMEOUT = 5  # a dead service must fail fast, not hang

WORD_LIST = {
    "apple", "bridge", "canyon", "dolphin", "ember", "falcon", "glacier", "harbor",
    "island", "jigsaw", "kettle", "lantern", "meadow", "nectar", "orchid", "pepper",
    "quartz", "rocket", "saddle", "timber",
}
STATE_KEYS = {
    "id", "player", "status", "length", "masked", "guessed_letters", "guessed_words",
    "wrong_guesses", "max_wrong", "remaining", "moves", "secret",
}


def unique_player(prefix: str = "p") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def post(path: str, body: Any = None, **kwargs: Any) -> requests.Response:
    return requests.post(API + path, json=body, timeout=TIMEOUT, **kwargs)


def get(path: str, **kwargs: Any) -> requests.Response:
    return requests.get(API + path, timeout=TIMEOUT, **kwargs)


def delete(path: str) -> requests.Response:
    return requests.delete(API + path, timeout=TIMEOUT)


def create_game(player: str | None = None, **fields: Any) -> dict[str, Any]:
    body = {"player": player or unique_player(), **fields}
    resp = post("/games", body)
    assert resp.status_code == 201, resp.text
    return resp.json()


def guess(game_id: str, **body: Any) -> requests.Response:
    return post(f"/games/{game_id}/guesses", body)


def assert_error(resp: requests.Response, status: int, code: str) -> None:
    assert resp.status_code == status, resp.text
    payload = resp.json()
    assert set(payload) == {"error"}, payload
    assert payload["error"]["code"] == code, payload
    assert isinstance(payload["error"]["message"], str) and payload["error"]["message"]


def leaderboard_row(player: str) -> dict[str, Any] | None:
    resp = get("/leaderboard")
    assert resp.status_code == 200, resp.text
    rows = [r for r in resp.json()["players"] if r["player"] == player]
    assert len(rows) <= 1, rows
    return rows[0] if rows else None


def test_health() -> None:
    resp = requests.get(BASE_URL + "/health", timeout=TIMEOUT)
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


def test_create_game_with_secret_hides_word() -> None:
    player = unique_player()
    game = create_game(player, secret="Banana", max_wrong=3)
    assert STATE_KEYS <= set(game)
    assert isinstance(game["id"], str) and game["id"]
    assert game["player"] == player
    assert game["status"] == "in_progress"
    assert game["length"] == 6
    assert game["masked"] == "_ _ _ _ _ _"
    assert game["guessed_letters"] == [] and game["guessed_words"] == []
    assert game["wrong_guesses"] == 0 and game["moves"] == 0
    assert game["max_wrong"] == 3 and game["remaining"] == 3
    assert game["secret"] is None
    assert "banana" not in str(game).lower().replace(player.lower(), "")


def test_create_game_defaults_and_random_secret_from_word_list() -> None:
    game = create_game()
    assert game["max_wrong"] == 6 and game["remaining"] == 6
    assert game["secret"] is None
    resp = post(f"/games/{game['id']}/resign")
    assert resp.status_code == 200, resp.text
    secret = resp.json()["secret"]
    assert secret in WORD_LIST
    assert len(secret) == game["length"]


def test_create_game_null_optionals_use_defaults() -> None:
    game = create_game(secret=None, max_wrong=None)
    assert game["max_wrong"] == 6
    assert game["status"] == "in_progress"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"player": ""},
        {"player": 42},
        {"player": "has space"},
        {"player": "x" * 33},
        {"player": "ok", "secret": "ab"},
        {"player": "ok", "secret": "abcdefghijklm"},
        {"player": "ok", "secret": "abc1"},
        {"player": "ok", "secret": 123},
        {"player": "ok", "max_wrong": 0},
        {"player": "ok", "max_wrong": 11},
        {"player": "ok", "max_wrong": True},
        {"player": "ok", "max_wrong": "5"},
        {"player": "ok", "max_wrong": 2.5},
        ["player", "ok"],
    ],
)
def test_create_game_validation_errors(body: Any) -> None:
    assert_error(post("/games", body), 400, "VALIDATION_ERROR")


def test_create_game_malformed_json_body() -> None:
    resp = requests.post(API + "/games", data="{not json", timeout=TIMEOUT,
                         headers={"Content-Type": "application/json"})
    assert_error(resp, 400, "VALIDATION_ERROR")


def test_get_game_returns_same_state() -> None:
    game = create_game(secret="orbit")
    resp = get(f"/games/{game['id']}")
    assert resp.status_code == 200
    assert resp.json() == game


def test_unknown_game_is_not_found_everywhere() -> None:
    missing = "missing-" + uuid.uuid4().hex
    assert_error(get(f"/games/{missing}"), 404, "NOT_FOUND")
    assert_error(guess(missing, letter="a"), 404, "NOT_FOUND")
    assert_error(post(f"/games/{missing}/resign"), 404, "NOT_FOUND")
    assert_error(delete(f"/games/{missing}"), 404, "NOT_FOUND")
    # 404 is checked before the body is validated.
    assert_error(guess(missing, letter="12"), 404, "NOT_FOUND")


def test_correct_letter_reveals_every_position() -> None:
    game = create_game(secret="banana")
    resp = guess(game["id"], letter="a")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["kind"] == "letter" and body["guess"] == "a"
    assert body["correct"] is True and body["occurrences"] == 3
    state = body["game"]
    assert state["masked"] == "_ a _ a _ a"
    assert state["guessed_letters"] == ["a"]
    assert state["wrong_guesses"] == 0 and state["remaining"] == 6
    assert state["moves"] == 1 and state["status"] == "in_progress"
    assert state["secret"] is None
    assert get(f"/games/{game['id']}").json() == state


def test_wrong_letter_counts_and_letters_are_sorted_lowercase() -> None:
    game = create_game(secret="banana", max_wrong=4)
    r1 = guess(game["id"], letter="Z")
    assert r1.status_code == 200, r1.text
    assert r1.json()["guess"] == "z"
    assert r1.json()["correct"] is False and r1.json()["occurrences"] == 0
    for letter in ("N", "x", "b", "k"):
        assert guess(game["id"], letter=letter).status_code == 200
    state = get(f"/games/{game['id']}").json()
    assert state["guessed_letters"] == ["b", "k", "n", "x", "z"]
    assert state["masked"] == "b _ n _ n _"
    assert state["wrong_guesses"] == 3 and state["remaining"] == 1
    assert state["moves"] == 5 and state["status"] == "in_progress"


def test_duplicate_letter_conflict_changes_nothing() -> None:
    game = create_game(secret="kayak")
    assert guess(game["id"], letter="q").status_code == 200
    before = get(f"/games/{game['id']}").json()
    assert_error(guess(game["id"], letter="q"), 409, "DUPLICATE_GUESS")
    assert_error(guess(game["id"], letter="Q"), 409, "DUPLICATE_GUESS")
    assert get(f"/games/{game['id']}").json() == before
    assert before["wrong_guesses"] == 1


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"letter": ""},
        {"letter": "ab"},
        {"letter": "1"},
        {"letter": 7},
        {"word": ""},
        {"word": "ab3de"},
        {"word": ["x"]},
        {"letter": "a", "word": "kayak"},
    ],
)
def test_invalid_guess_body_is_validation_error(body: dict[str, Any]) -> None:
    game = create_game(secret="kayak")
    assert_error(guess(game["id"], **body), 400, "VALIDATION_ERROR")
    state = get(f"/games/{game['id']}").json()
    assert state["moves"] == 0 and state["wrong_guesses"] == 0


def test_win_by_letters_reveals_secret() -> None:
    game = create_game(secret="noon")
    assert guess(game["id"], letter="n").json()["game"]["status"] == "in_progress"
    body = guess(game["id"], letter="o").json()
    state = body["game"]
    assert state["status"] == "won"
    assert state["masked"] == "n o o n"
    assert state["secret"] == "noon"
    assert get(f"/games/{game['id']}").json()["secret"] == "noon"


def test_win_by_word_guess() -> None:
    game = create_game(secret="Quartz")
    guess(game["id"], letter="q")
    resp = guess(game["id"], word="QUARTZ")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["kind"] == "word" and body["guess"] == "quartz"
    assert body["correct"] is True and body["occurrences"] is None
    state = body["game"]
    assert state["status"] == "won"
    assert state["masked"] == "q u a r t z"
    assert state["secret"] == "quartz"
    assert state["guessed_words"] == ["quartz"]
    assert state["guessed_letters"] == ["q"]
    assert state["moves"] == 2 and state["wrong_guesses"] == 0


def test_wrong_word_costs_a_guess_and_cannot_be_repeated() -> None:
    game = create_game(secret="river", max_wrong=5)
    resp = guess(game["id"], word="rover")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["correct"] is False and body["occurrences"] is None
    state = body["game"]
    assert state["wrong_guesses"] == 1 and state["remaining"] == 4
    assert state["guessed_words"] == ["rover"]
    assert state["guessed_letters"] == []
    assert state["masked"] == "_ _ _ _ _"
    assert_error(guess(game["id"], word="ROVER"), 409, "DUPLICATE_GUESS")
    assert get(f"/games/{game['id']}").json()["wrong_guesses"] == 1


def test_word_of_wrong_length_is_invalid_move_without_penalty() -> None:
    game = create_game(secret="river")
    assert_error(guess(game["id"], word="rivers"), 422, "INVALID_MOVE")
    assert_error(guess(game["id"], word="riv"), 422, "INVALID_MOVE")
    state = get(f"/games/{game['id']}").json()
    assert state["wrong_guesses"] == 0 and state["moves"] == 0
    assert state["guessed_words"] == []


def test_losing_when_wrong_guesses_reach_max() -> None:
    game = create_game(secret="plum", max_wrong=2)
    assert guess(game["id"], letter="x").json()["game"]["status"] == "in_progress"
    state = guess(game["id"], word="plus").json()["game"]
    assert state["status"] == "lost"
    assert state["wrong_guesses"] == 2 and state["remaining"] == 0
    assert state["secret"] == "plum"
    assert state["masked"] == "_ _ _ _"


def test_moves_after_game_over_are_rejected() -> None:
    game = create_game(secret="oxe")
    for letter in "oxe":
        guess(game["id"], letter=letter)
    assert get(f"/games/{game['id']}").json()["status"] == "won"
    assert_error(guess(game["id"], letter="z"), 409, "GAME_OVER")
    # GAME_OVER wins over DUPLICATE_GUESS and INVALID_MOVE, but not over validation.
    assert_error(guess(game["id"], letter="o"), 409, "GAME_OVER")
    assert_error(guess(game["id"], word="toolong"), 409, "GAME_OVER")
    assert_error(guess(game["id"], letter="99"), 400, "VALIDATION_ERROR")
    assert_error(post(f"/games/{game['id']}/resign"), 409, "GAME_OVER")
    assert get(f"/games/{game['id']}").json()["moves"] == 3


def test_resign_reveals_secret_and_is_final() -> None:
    game = create_game(secret="walnut")
    guess(game["id"], letter="a")
    resp = post(f"/games/{game['id']}/resign")
    assert resp.status_code == 200, resp.text
    state = resp.json()
    assert state["status"] == "resigned"
    assert state["secret"] == "walnut"
    assert state["masked"] == "_ a _ _ _ _"
    assert_error(post(f"/games/{game['id']}/resign"), 409, "GAME_OVER")
    assert_error(guess(game["id"], word="walnut"), 409, "GAME_OVER")
    assert get(f"/games/{game['id']}").json()["status"] == "resigned"


def test_delete_game() -> None:
    game = create_game(secret="cedar")
    resp = delete(f"/games/{game['id']}")
    assert resp.status_code == 204
    assert resp.content == b""
    assert_error(get(f"/games/{game['id']}"), 404, "NOT_FOUND")
    assert_error(guess(game["id"], letter="c"), 404, "NOT_FOUND")
    assert_error(delete(f"/games/{game['id']}"), 404, "NOT_FOUND")


def test_list_games_filters_by_player_and_paginates() -> None:
    player = unique_player("list")
    ids = [create_game(player, secret="alpha")["id"] for _ in range(3)]
    create_game(unique_player("other"), secret="alpha")
    resp = get("/games", params={"player": player})
    assert resp.status_code == 200, resp.text
    page = resp.json()
    assert page["total"] == 3 and page["limit"] == 20 and page["offset"] == 0
    assert [g["id"] for g in page["items"]] == ids
    assert all(g["player"] == player and g["secret"] is None for g in page["items"])
    page = get("/games", params={"player": player, "limit": 2, "offset": 1}).json()
    assert page["total"] == 3 and page["limit"] == 2 and page["offset"] == 1
    assert [g["id"] for g in page["items"]] == ids[1:]
    page = get("/games", params={"player": player, "offset": 5}).json()
    assert page["total"] == 3 and page["items"] == []


def test_list_games_filters_by_status_and_hides_deleted() -> None:
    player = unique_player("status")
    playing = create_game(player, secret="lemon")
    won = create_game(player, secret="lemon")
    guess(won["id"], word="lemon")
    resigned = create_game(player, secret="lemon")
    post(f"/games/{resigned['id']}/resign")
    gone = create_game(player, secret="lemon")
    assert delete(f"/games/{gone['id']}").status_code == 204

    def ids(status: str | None) -> list[str]:
        params = {"player": player, **({"status": status} if status else {})}
        resp = get("/games", params=params)
        assert resp.status_code == 200, resp.text
        return [g["id"] for g in resp.json()["items"]]

    assert ids(None) == [playing["id"], won["id"], resigned["id"]]
    assert ids("in_progress") == [playing["id"]]
    assert ids("won") == [won["id"]]
    assert ids("resigned") == [resigned["id"]]
    assert ids("lost") == []


@pytest.mark.parametrize(
    "params",
    [{"status": "finished"}, {"limit": 0}, {"limit": 101}, {"limit": "ten"}, {"offset": -1}],
)
def test_list_games_invalid_query(params: dict[str, Any]) -> None:
    assert_error(get("/games", params=params), 400, "VALIDATION_ERROR")


def test_leaderboard_counts_results_and_survives_delete() -> None:
    player = unique_player("lb")
    assert leaderboard_row(player) is None
    for _ in range(2):
        g = create_game(player, secret="mango")
        assert guess(g["id"], word="mango").json()["game"]["status"] == "won"
    lost = create_game(player, secret="mango", max_wrong=1)
    assert guess(lost["id"], letter="z").json()["game"]["status"] == "lost"
    create_game(player, secret="mango")  # in progress: not counted
    row = leaderboard_row(player)
    assert row is not None
    assert row["wins"] == 2 and row["losses"] == 1 and row["games"] == 3
    assert row["win_rate"] == pytest.approx(0.6667, abs=1e-9)

    resigned = create_game(player, secret="mango")
    post(f"/games/{resigned['id']}/resign")
    assert delete(f"/games/{lost['id']}").status_code == 204
    row = leaderboard_row(player)
    assert row is not None
    assert row["wins"] == 2 and row["losses"] == 2 and row["games"] == 4
    assert row["win_rate"] == pytest.approx(0.5, abs=1e-9)


def test_leaderboard_ordering() -> None:
    tag = uuid.uuid4().hex[:8]
    # Same wins for b and c, c has fewer losses; a has the most wins.
    players = {"a": f"a_{tag}", "b": f"b_{tag}", "c": f"c_{tag}"}
    plan = {"a": (3, 0), "b": (1, 2), "c": (1, 1)}
    for key, (wins, losses) in plan.items():
        for _ in range(wins):
            g = create_game(players[key], secret="fig")
            guess(g["id"], word="fig")
        for _ in range(losses):
            g = create_game(players[key], secret="fig")
            post(f"/games/{g['id']}/resign")
    resp = get("/leaderboard")
    assert resp.status_code == 200
    names = [r["player"] for r in resp.json()["players"]]
    mine = [n for n in names if n in players.values()]
    assert mine == [players["a"], players["c"], players["b"]]
    assert len(names) == len(set(names))


def test_unknown_route_uses_error_envelope() -> None:
    assert_error(get("/nothing-here-" + uuid.uuid4().hex[:6]), 404, "NOT_FOUND")
    resp = requests.get(BASE_URL + "/definitely/not/a/route", timeout=TIMEOUT)
    assert_error(resp, 404, "NOT_FOUND")


def test_wrong_method_uses_error_envelope() -> None:
    game = create_game(secret="plank")
    resp = requests.put(f"{API}/games/{game['id']}", json={}, timeout=TIMEOUT)
    assert_error(resp, 405, "METHOD_NOT_ALLOWED")
    assert_error(delete("/leaderboard"), 405, "METHOD_NOT_ALLOWED")
    resp = requests.get(f"{API}/games/{game['id']}/guesses", timeout=TIMEOUT)
    assert_error(resp, 405, "METHOD_NOT_ALLOWED")
