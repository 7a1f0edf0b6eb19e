"""Telemetry: what the daemon tells operators.

`observer.py` fans each call out to its span (`spans.py`, exported by
`tracing.py` and `span_encoding.py`), the Prometheus metrics (`metrics.py`)
and the decision log (`decision_log.py`), all with the fields of
`fields.py`; `loop_lag.py` measures the event loop. Repeated log lines go
through the daemon's one throttle (`squawk/daemon/throttle.py`), which the
fleet store below shares.
"""
