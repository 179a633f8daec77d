"""Translators shipped as examples (the demo shop's)."""
