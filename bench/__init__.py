"""The benchmark: load generator and echo floors (Go), runner and core micro-benchmark.

`make bench` runs `python -m bench.run`; see bench/README.md for the method.
"""
