"""A local S3 API (moto) for trying s3:// workspaces and paths without a cloud account, and for tests.

    python tests/support/s3server.py --port 9000 --bucket work
    AWS_ENDPOINT_URL=http://127.0.0.1:9000 python -m olmocr.pipeline workspace=s3://work/ws …

Requests are answered one at a time: S3 applies a conditional write (``If-None-Match``, ``If-Match``)
atomically, and moto's check-then-write is atomic only when no other request runs beside it. Needs the
``dev`` extra (moto).
"""

from __future__ import annotations

import argparse
import os
import threading


class S3Server:
    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import WSGIRequestHandler, make_server

        app = DomainDispatcherApplication(create_backend_app)
        one_at_a_time = threading.Lock()

        def serial(environ, start_response):
            with one_at_a_time:
                return [b"".join(app(environ, start_response))]

        class Quiet(WSGIRequestHandler):
            def log_request(self, *args, **kwargs):
                pass

        self._server = make_server(host, port, serial, threaded=True, request_handler=Quiet)
        self.endpoint = f"http://{host}:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3server", daemon=True)

    def start(self) -> S3Server:
        import urllib.request

        self._thread.start()
        # moto keeps its buckets per process, not per server: a new server starts empty.
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")).close()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()  # free the port now, not when the object is collected
        self._thread.join()

    def environment(self) -> dict[str, str]:
        """What a client needs to reach this server (moto takes any credentials)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

    def make_bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                     aws_secret_access_key="testing", region_name="us-east-1").create_bucket(Bucket=name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--bucket", action="append", default=[], help="create this bucket (repeatable)")
    args = parser.parse_args()
    server = S3Server(args.host, args.port).start()
    for bucket in args.bucket:
        server.make_bucket(bucket)
    print(" ".join(f"{k}={v}" for k, v in server.environment().items()), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()
        os._exit(0)


if __name__ == "__main__":
    main()
