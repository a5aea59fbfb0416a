#!/usr/bin/env python3
"""A stand-in for the Kubernetes API server's core/v1 events endpoints, over real TLS.

usage: fake_apiserver.py --cert C --key K --port-file F --log L [--hang]

Listens on 127.0.0.1 (a free port, written to --port-file once listening). Every request is
appended to --log as one JSON line: method, path, authorization, content_type, body.
POST /api/v1/namespaces/<ns>/events creates (201); PATCH .../events/<name> answers 200 for
an event created before, 404 otherwise, as the API server does. --hang: accept connections
and TLS, then never answer (a stuck API server).
"""
import argparse
import http.server
import json
import os
import re
import ssl
import threading
import time

EVENTS = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/events(?:/([a-z0-9.-]+))?$")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--hang", action="store_true")
    args = p.parse_args()
    created = set()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def answer(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def handle_any(self):
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
            if args.hang:
                time.sleep(3600)
                return
            with lock:
                with open(args.log, "a") as log:
                    log.write(json.dumps({"method": self.command, "path": self.path,
                                          "authorization": self.headers.get("Authorization", ""),
                                          "content_type": self.headers.get("Content-Type", ""),
                                          "body": body}) + "\n")
                m = EVENTS.match(self.path)
                if not m:
                    return self.answer(404, {"kind": "Status", "message": "not found"})
                ns, name = m.groups()
                if self.command == "POST" and name is None:
                    obj = json.loads(body)
                    created.add((ns, obj["metadata"]["name"]))
                    return self.answer(201, obj)
                if self.command == "PATCH" and name is not None:
                    if (ns, name) not in created:
                        return self.answer(404, {"kind": "Status", "reason": "NotFound",
                                                 "message": f'events "{name}" not found'})
                    return self.answer(200, json.loads(body))
                return self.answer(405, {"kind": "Status", "message": "method not allowed"})

        do_POST = handle_any
        do_PATCH = handle_any
        do_GET = handle_any

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(args.port_file + ".tmp", args.port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
