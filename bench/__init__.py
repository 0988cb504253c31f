"""Benchmarks of the MST engine and service: ``python -m bench --suite quick|full`` (see bench/README.md)."""
