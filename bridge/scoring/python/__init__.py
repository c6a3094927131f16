"""Python scoring: the plan builder, the two profiles (strict, compat) and strict's grading (the
suite's own collection, pytest's output read back)."""
