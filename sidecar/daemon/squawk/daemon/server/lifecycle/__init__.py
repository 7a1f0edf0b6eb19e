"""The process: building and running the daemon (`app.py`), its listeners
(`listeners.py`), TLS files (`tls.py`) and policy reloads (`reload.py`).
"""
