"""Domain model of Word Duel: games, their state machine, the in-memory store."""
from __future__ import annotations

import random
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

# The documented word list used when a game is created without a secret.
WORD_LIST: tuple[str, ...] = (
    "apple", "bridge", "canyon", "dolphin", "ember",
    "falcon", "glacier", "harbor", "island", "jigsaw",
    "kettle", "lantern", "meadow", "nectar", "orchid",
    "pepper", "quartz", "rocket", "saddle", "timber",
)

IN_PROGRESS = "in_progress"
WON = "won"
LOST = "lost"
RESIGNED = "resigned"
STATUSES: frozenset[str] = frozenset({IN_PROGRESS, WON, LOST, RESIGNED})


class GameError(Exception):
    """A rule violation that maps to one documented error code."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Game:
    id: str
    player: str
    secret: str
    max_wrong: int
    seq: int
    guessed_letters: set[str] = field(default_factory=set)
    guessed_words: list[str] = field(default_factory=list)
    wrong_guesses: int = 0
    status: str = IN_PROGRESS

    @property
    def over(self) -> bool:
        return self.status != IN_PROGRESS

    def masked(self) -> str:
        if self.status == WON:
            return " ".join(self.secret)
        return " ".join(c if c in self.guessed_letters else "_" for c in self.secret)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "player": self.player,
            "status": self.status,
            "length": len(self.secret),
            "masked": self.masked(),
            "guessed_letters": sorted(self.guessed_letters),
            "guessed_words": list(self.guessed_words),
            "wrong_guesses": self.wrong_guesses,
            "max_wrong": self.max_wrong,
            "remaining": self.max_wrong - self.wrong_guesses,
            "moves": len(self.guessed_letters) + len(self.guessed_words),
            # Never leak the secret while the game can still be played.
            "secret": self.secret if self.over else None,
        }

    def _miss(self) -> None:
        self.wrong_guesses += 1
        if self.wrong_guesses >= self.max_wrong:
            self.status = LOST

    def guess_letter(self, letter: str) -> int:
        self._ensure_playable()
        if letter in self.guessed_letters:
            raise GameError(409, "DUPLICATE_GUESS", f"letter '{letter}' was already guessed")
        self.guessed_letters.add(letter)
        hits = self.secret.count(letter)
        if hits == 0:
            self._miss()
        elif all(c in self.guessed_letters for c in self.secret):
            self.status = WON
        return hits

    def guess_word(self, word: str) -> bool:
        self._ensure_playable()
        if len(word) != len(self.secret):
            raise GameError(422, "INVALID_MOVE", f"word must have {len(self.secret)} letters")
        if word in self.guessed_words:
            raise GameError(409, "DUPLICATE_GUESS", f"word '{word}' was already guessed")
        self.guessed_words.append(word)
        if word == self.secret:
            self.status = WON
            return True
        self._miss()
        return False

    def resign(self) -> None:
        self._ensure_playable()
        self.status = RESIGNED

    def _ensure_playable(self) -> None:
        if self.over:
            raise GameError(409, "GAME_OVER", f"game is already {self.status}")


@dataclass
class Record:
    wins: int = 0
    losses: int = 0


class Store:
    """Thread-safe in-memory store; the leaderboard outlives deleted games."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._games: dict[str, Game] = {}
        self._records: dict[str, Record] = {}
        self._seq = 0

    def create(self, player: str, secret: str | None, max_wrong: int) -> dict[str, Any]:
        with self._lock:
            self._seq += 1
            game = Game(
                id=uuid.uuid4().hex,
                player=player,
                secret=secret if secret is not None else random.choice(WORD_LIST),
                max_wrong=max_wrong,
                seq=self._seq,
            )
            self._games[game.id] = game
            return game.to_dict()

    def _get(self, game_id: str) -> Game:
        game = self._games.get(game_id)
        if game is None:
            raise GameError(404, "NOT_FOUND", f"game '{game_id}' not found")
        return game

    def ensure_exists(self, game_id: str) -> None:
        with self._lock:
            self._get(game_id)

    def get(self, game_id: str) -> dict[str, Any]:
        with self._lock:
            return self._get(game_id).to_dict()

    def list(self, player: str | None, status: str | None) -> list[dict[str, Any]]:
        with self._lock:
            games = sorted(self._games.values(), key=lambda g: g.seq)
            return [
                g.to_dict()
                for g in games
                if (player is None or g.player == player) and (status is None or g.status == status)
            ]

    def _settle(self, game: Game, was_over: bool) -> None:
        # Record the result exactly once, at the moment the game ends.
        if was_over or not game.over:
            return
        rec = self._records.setdefault(game.player, Record())
        if game.status == WON:
            rec.wins += 1
        else:
            rec.losses += 1

    def guess(self, game_id: str, letter: str | None, word: str | None) -> dict[str, Any]:
        with self._lock:
            game = self._get(game_id)
            was_over = game.over
            if letter is not None:
                hits = game.guess_letter(letter)
                result: dict[str, Any] = {"kind": "letter", "guess": letter,
                                          "correct": hits > 0, "occurrences": hits}
            else:
                assert word is not None
                correct = game.guess_word(word)
                result = {"kind": "word", "guess": word, "correct": correct, "occurrences": None}
            self._settle(game, was_over)
            result["game"] = game.to_dict()
            return result

    def resign(self, game_id: str) -> dict[str, Any]:
        with self._lock:
            game = self._get(game_id)
            was_over = game.over
            game.resign()
            self._settle(game, was_over)
            return game.to_dict()

    def delete(self, game_id: str) -> None:
        with self._lock:
            self._get(game_id)
            del self._games[game_id]

    def leaderboard(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = [
                {
                    "player": name,
                    "wins": r.wins,
                    "losses": r.losses,
                    "games": r.wins + r.losses,
                    "win_rate": round(r.wins / (r.wins + r.losses), 4),
                }
                for name, r in self._records.items()
            ]
        rows.sort(key=lambda row: (-row["wins"], row["losses"], row["player"]))
        return rows
