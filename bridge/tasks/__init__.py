"""Layer 1, tasks: what a benchmark task is (model), where tasks come from (shipped folders, a RepoGenesis checkout) and what their golden suites look like."""
