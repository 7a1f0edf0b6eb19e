"""The daemon's server, in four rooms: `rpc/` (the boundary every call
passes), `tracking/` (the upstream state), `telemetry/` and `lifecycle/`
(the process). Each imports the core and the rooms below it, never the CLI.
"""
