"""The working-time clock of a session: time accumulates only while it runs (inspect human_cli)."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Span(BaseModel):
    start: str
    end: str | None = None

    def seconds(self, now: datetime | None = None) -> float:
        end = parse_iso(self.end) if self.end else (now or utcnow())
        return max(0.0, (end - parse_iso(self.start)).total_seconds())


class Clock(BaseModel):
    """Spans of running time. Persisted inside session.json, so it survives restarts."""

    spans: list[Span] = Field(default_factory=list)

    @property
    def running(self) -> bool:
        return bool(self.spans) and self.spans[-1].end is None

    def start(self, now: datetime | None = None) -> bool:
        if self.running:
            return False
        self.spans.append(Span(start=iso(now or utcnow())))
        return True

    def stop(self, now: datetime | None = None) -> bool:
        if not self.running:
            return False
        self.spans[-1].end = iso(now or utcnow())
        return True

    def elapsed(self, now: datetime | None = None) -> float:
        return sum(span.seconds(now) for span in self.spans)
