"""The Squawk daemon: the gRPC server, the analyzers and the `squawk` command.

The policy itself lives in `squawk.policy` (the shared core distribution);
nothing here decides a retry on its own.
"""
