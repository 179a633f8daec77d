"""materializers."""
