"""Running scoring: the engine and its result cache, the backends (local threads, a Ray cluster),
the profile runs, `evaluate`, sweeping, the scoring work folder and run reports."""
