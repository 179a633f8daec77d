"""bottler."""
