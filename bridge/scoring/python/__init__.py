"""Python scoring: the plan builder, the two profiles (strict, compat), strict's grading
(collection, the suite's report) and requirement files."""
