"""Telemetry: what the daemon tells operators.

`observer.py` fans each call out to its span (`spans.py`, exported by
`tracing.py` and `span_encoding.py`), the Prometheus metrics (`metrics.py`)
and the decision log (`decision_log.py`), all with the fields of
`fields.py`; `throttle.py` keeps every repeated log line to one per
interval; `loop_lag.py` measures the event loop.
"""
