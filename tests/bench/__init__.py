"""Benchmarks (`make bench`): every rate printed beside the raw ceiling measured in the same run."""
