"""Migration tooling for the target-Postgres replica: `bottler migrate status` (lag and row
counts per table) and `bottler migrate verify` (source and target compared row by row)."""
