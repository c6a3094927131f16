"""Layer 4, sessions: a task opened in a workspace — the session verbs, the live recorder and clock, ownership of a session, attempts, contamination watch, recovery after a crash."""
