"""The hotel-search API the README's client examples call, on loopback.

It refuses a city code it does not know with the 400 a real API sends
("INVALID CITY CODE: PARIS"), so an example's runner asks Squawk, is told
to CORRECT, calls the example's `fixParams` and tries again with PAR.
It takes the parameters as a JSON body (POST) or a query string (GET) and
remembers each city code it was sent, in order.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOTELS = [{"name": "Hotel du Louvre", "city_code": "PAR"}]


class HotelApi:
    def __init__(self) -> None:
        self.seen: list[str] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.urlsplit(self.path).query
                self.answer(dict(urllib.parse.parse_qsl(query)))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self.answer(json.loads(self.rfile.read(length) or b"{}"))

            def answer(self, params: dict[str, Any]) -> None:
                city = str(params.get("city_code", ""))
                body: dict[str, Any]
                api.seen.append(city)
                if city == "PAR":
                    status, body = 200, {"hotels": HOTELS}
                else:
                    message = f"INVALID CITY CODE: {city}"
                    status, body = 400, {"success": False, "error": {"message": message}}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/search"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HotelApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
