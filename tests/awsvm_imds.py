"""The instance metadata service of one harness VM (tests/awsvm.py): run inside the VM's network
namespace, bound to 169.254.169.254:80 as on EC2.

``python tests/awsvm_imds.py DIR INSTANCE_ID`` serves IMDSv2: ``PUT /latest/api/token`` gives a
session token, and with it ``GET /latest/meta-data/instance-id`` and
``GET /latest/meta-data/spot/instance-action`` — the content of ``DIR/instance-action.json``
once the test wrote it (the two-minute warning), else 404 as on EC2.
"""

from __future__ import annotations

import secrets
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ADDRESS = "169.254.169.254"


def main() -> None:
    folder, instance_id = Path(sys.argv[1]), sys.argv[2]
    token = secrets.token_hex(16)

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: bytes = b"") -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self) -> None:
            if self.path == "/latest/api/token":
                self._send(200, token.encode())
            else:
                self._send(404)

        def do_GET(self) -> None:
            if self.headers.get("X-aws-ec2-metadata-token") != token:
                self._send(401)
            elif self.path == "/latest/meta-data/instance-id":
                self._send(200, instance_id.encode())
            elif self.path == "/latest/meta-data/spot/instance-action":
                action = folder / "instance-action.json"
                self._send(200, action.read_bytes()) if action.exists() else self._send(404)
            else:
                self._send(404)

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    ThreadingHTTPServer((ADDRESS, 80), Handler).serve_forever()


if __name__ == "__main__":
    main()
