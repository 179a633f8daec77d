"""Migration tooling for the target-Postgres replica: `bottler migrate status` (lag and row
counts per table), `bottler migrate verify` (source and target compared row by row) and
`bottler migrate cutover` (preconditions, the fence, verification at the fence, then the
sequences, defaults, checks and post-data objects carried over: docs/migration.md)."""
