"""The RPC boundary: the PolicyService servicer (`servicer.py`), the
wrapper that turns refusals and failures into statuses (`boundary.py`), the
reuse of stateless answers (`decisions.py`), health and server reflection.
"""
