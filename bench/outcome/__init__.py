"""The outcome benchmark (`make bench-outcome`): executors against an upstream of capacity C."""
