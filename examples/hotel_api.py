"""A stand-in hotel-search API for the examples, standard library only.

    python3 examples/hotel_api.py [PORT]     # serves http://127.0.0.1:PORT (8080)

It behaves as real APIs often do:

- `GET /search?city_code=PAR&nights=2` answers 200 with the hotels of a
  city it knows by its three-letter code (PAR, LON, NYC);
- a city *name* instead of its code (`city_code=PARIS`) is refused with a
  400 whose message names the valid code ("... Use PAR."): Squawk's
  offline analyzer reads that hint, so an executor can correct the call;
- a code it knows nothing of (`city_code=XYZ`) is refused with a 400 that
  names no fix: nothing can safely correct it;
- `GET /down?...` always answers 503, an outage: the step runner retries it
  with backoff until the attempt budget is spent, then fails the step.

Run as a program, it prints each request and its status, to watch a
step's retries and corrections; `HotelApi.seen` keeps each request's query,
in order, for the tests (tests/test_examples.py) that run the examples
against it.
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOTELS = {
    "PAR": [{"name": "Hotel du Louvre"}, {"name": "Le Marais Suites"}],
    "LON": [{"name": "The Strand Palace"}],
    "NYC": [{"name": "Hotel Chelsea"}],
}
CODES = {"PARIS": "PAR", "LONDON": "LON", "NEW YORK": "NYC"}


def answer(path: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """The status and JSON body for one request."""
    city = query.get("city_code", "")
    if path == "/down":
        return 503, {"error": {"message": "The hotel search is down for maintenance."}}
    if path != "/search":
        return 404, {"error": {"message": f"No such endpoint: {path}"}}
    if city in HOTELS:
        return 200, {"city_code": city, "hotels": HOTELS[city]}
    message = f"INVALID CITY CODE: {city}."
    if city.upper() in CODES:
        message += f" Use {CODES[city.upper()]}."
    return 400, {"error": {"code": "INVALID_CITY_CODE", "message": message}}


class HotelApi:
    """The API on a loopback port, served from a thread while in a `with`."""

    def __init__(self, port: int = 0, *, echo: bool = False) -> None:
        self.seen: list[dict[str, str]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                api.seen.append(query)
                status, body = answer(url.path, query)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if echo:
                    print(f"GET {self.path} -> {status}", flush=True)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HotelApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8080
    api = HotelApi(port, echo=True)
    print(f"hotel API on {api.url}/search (and {api.url}/down, always 503)", flush=True)
    try:
        api.server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        api.server.server_close()
