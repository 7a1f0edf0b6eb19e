"""The upstream state: the pod's registry of tracked upstreams
(`registry.py`), the seam every RPC reads it through (`pod_store.py`), and
the fleet store that shares it over Redis (`fleet_store.py` and the
`fleet_*` parts it composes, the script `fleet.lua` with `fleet_sums.lua`).
"""
