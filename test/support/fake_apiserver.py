#!/usr/bin/env python3
"""A stand-in for the Kubernetes API server's endpoints gpu-devwatch uses, over real TLS.

usage: fake_apiserver.py --cert C --key K --port-file F --log L --state DIR [--hang]
                         [--admission-policy FILE [--token-node NODE]]

Listens on 127.0.0.1 (a free port, written to --port-file once listening). Every request is
appended to --log as one JSON line: method, path, authorization, content_type, user_agent,
body. It keeps state as the API server does: the PATCHes are applied to the objects it
serves (strategic merge: maps merged, `conditions` lists merged by type, other lists
replaced, null deletes), and what it serves next shows them.

- POST /api/v1/namespaces/<ns>/events creates (201); PATCH .../events/<name> answers 200 for
  an event created before, 404 otherwise, as the API server does.
- GET /api/v1/nodes/<node>: the Node, its status as the patches left it.
- PATCH /api/v1/nodes/<node>/status: the strategic merge patch applied to the node; DIR/node.json
  holds the node's status after each.
- GET /api/v1/pods?fieldSelector=spec.nodeName%3D<node>[&limit=N&continue=T]: this node's
  pods, paged (a quorum read); with resourceVersion=0: all of them from the watch cache, the
  limit ignored, as the API server's cache answers. With &watch=true&resourceVersion=RV: a
  chunked stream of watch events after RV; an RV older than the last compaction gets an
  ERROR event with code 410, as does an open watch when the test expires it.
- PATCH /api/v1/namespaces/<ns>/pods/<name>/status: merges the conditions into the pod
  (a MODIFIED event follows); 404 for no such pod, 422 when metadata.uid differs.
- The test steers it through DIR/commands.jsonl, one JSON object a line, read as appended:
  {"add": pod} / {"modify": pod} / {"delete": [ns, name]}, {"compact": true} (watches from
  earlier resourceVersions get 410), {"drop": true} (every open watch is cut off),
  {"expire": [changes]} (the changes, add/modify/delete commands, are made; then every open
  watch ends with an ERROR event, code 410, in place of the events it has not sent yet, as
  a watch ends when etcd compacted the revisions it had still to send, and earlier
  resourceVersions are compacted: only a new list shows those changes),
  {"node_conditions": [...]} (the node's conditions as a previous run left them).
  DIR/mode holds "ok", "500" (every request answered 500), "429:N" or "503:N" (answered so
  with Retry-After: N) or "hang" (requests wait, without an answer, until the mode changes;
  the connection is then closed). DIR/pods.json holds every pod after each change.
--hang: as DIR/mode "hang" from the start, for good.
--admission-policy: the ValidatingAdmissionPolicies of FILE (a manifest) admit or deny every
  node and pod status PATCH, as the API server runs them (admission.py, cel.py): on the
  object after the patch, status subresource rules applied (the spec stays as it was), with
  a denial answered as the API server answers it (403 Forbidden, the policy's message) and
  the object left unchanged. Every bearer token is taken as the DaemonSet's ServiceAccount
  token (system:serviceaccount:gpu-devwatch:gpu-devwatch), bound to a pod on --token-node:
  its request.userInfo.extra carries authentication.kubernetes.io/node-name [NODE], as a
  projected token's does ("" or absent: a token without the claim).
"""
import argparse
import copy
import http.server
import json
import os
import re
import ssl
import threading
import time
import urllib.parse

import admission

EVENTS = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/events(?:/([a-z0-9.-]+))?$")
NODE_STATUS = re.compile(r"^/api/v1/nodes/([a-z0-9.-]+)/status$")
NODE = re.compile(r"^/api/v1/nodes/([a-z0-9.-]+)$")
POD_STATUS = re.compile(r"^/api/v1/namespaces/([a-z0-9-]+)/pods/([a-z0-9.-]+)/status$")
SERVICE_ACCOUNT = "system:serviceaccount:gpu-devwatch:gpu-devwatch"
NODE_CLAIM = "authentication.kubernetes.io/node-name"


class State:
    """Pods, their event history (resourceVersions), the node's conditions and events."""

    def __init__(self, state_dir):
        self.dir = state_dir
        self.cv = threading.Condition()
        self.pods = {}      # (ns, name) -> pod
        self.history = []   # (rv, type, pod)
        self.rv = 100
        self.compacted = 0  # watches from an RV below this get 410
        self.drops = 0
        self.expiries = 0
        self.node = {"conditions": []}  # the node's status
        self.created = set()
        self.commands_read = 0

    def record(self, kind, pod):
        self.rv += 1
        pod["metadata"]["resourceVersion"] = str(self.rv)
        self.history.append((self.rv, kind, copy.deepcopy(pod)))
        self.save_pods()
        self.cv.notify_all()

    def save_pods(self):
        write_json(os.path.join(self.dir, "pods.json"), list(self.pods.values()))

    def apply(self, command):
        if "add" in command or "modify" in command:
            pod = command.get("add") or command.get("modify")
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            self.pods[key] = pod
            self.record("ADDED" if "add" in command else "MODIFIED", pod)
        elif "delete" in command:
            pod = self.pods.pop(tuple(command["delete"]), None)
            if pod:
                self.record("DELETED", pod)
        elif command.get("compact"):
            self.rv += 1  # what a watcher saw last is now older than the compaction
            self.compacted = self.rv
        elif "expire" in command:
            for change in command["expire"]:
                self.apply(change)  # in the same instant: no open watch sends them
            self.rv += 1
            self.compacted = self.rv
            self.expiries += 1
            self.cv.notify_all()
        elif command.get("drop"):
            self.drops += 1
            self.cv.notify_all()
        elif "node_conditions" in command:
            self.node["conditions"] = command["node_conditions"]
            write_json(os.path.join(self.dir, "node.json"), self.node)

    def poll_commands(self):
        path = os.path.join(self.dir, "commands.jsonl")
        while True:
            try:
                with open(path) as f:
                    lines = f.read().split("\n")
            except FileNotFoundError:
                lines = []
            complete = lines[:-1]  # the last part has no newline yet
            with self.cv:
                for line in complete[self.commands_read:]:
                    if line.strip():
                        self.apply(json.loads(line))
                self.commands_read = max(self.commands_read, len(complete))
            time.sleep(0.02)


def write_json(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.rename(path + ".tmp", path)


def merge_conditions(existing, patch):
    by_type = {c["type"]: c for c in existing}
    for c in patch:
        by_type[c["type"]] = dict(by_type.get(c["type"], {}), **c)
    return list(by_type.values())


def strategic_merge(target, patch):
    """Applies a strategic merge patch to `target` in place, as the API server does for the
    fields used here: maps merged key by key, `conditions` merged by their type (the
    patchMergeKey of NodeStatus and PodStatus), any other list replaced, null deleting."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif key == "conditions" and isinstance(value, list):
            target[key] = merge_conditions(target.get(key, []), value)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            strategic_merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None     # set by main(): the server's State
    args = None      # and its arguments
    policies = None  # and the admission policies (admission.load), None without
    log_lock = threading.Lock()

    def mode(self):
        if self.args.hang:
            return "hang"
        try:
            with open(os.path.join(self.args.state, "mode")) as f:
                return f.read().strip() or "ok"
        except FileNotFoundError:
            return "ok"

    def log_message(self, *a):
        pass

    def answer(self, status, obj, headers=None):
        data = json.dumps(obj).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code, reason, message, headers=None):
        return self.answer(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "reason": reason, "message": message, "code": code}, headers)

    def handle_any(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode("utf-8", "replace") if length else ""
        with self.log_lock:
            with open(self.args.log, "a") as log:
                log.write(json.dumps({"method": self.command, "path": self.path,
                                      "authorization": self.headers.get("Authorization", ""),
                                      "content_type": self.headers.get("Content-Type", ""),
                                      "user_agent": self.headers.get("User-Agent", ""),
                                      "time": time.time(), "body": body}) + "\n")
        if self.mode() == "hang":
            while self.mode() == "hang":
                time.sleep(0.05)
            self.close_connection = True
            return
        if self.mode() == "500":
            return self.status(500, "InternalError", "injected by the test")
        if self.mode().startswith(("429:", "503:")):
            code, after = self.mode().split(":")
            return self.status(int(code), "TooManyRequests" if code == "429" else "ServiceUnavailable",
                               "injected by the test", {"Retry-After": after})
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/api/v1/pods" and self.command == "GET":
            return self.watch(query) if query.get("watch") == ["true"] else self.list(query)
        for pattern, handler in ((EVENTS, self.events), (NODE_STATUS, self.node_status),
                                 (POD_STATUS, self.pod_status), (NODE, self.node_get)):
            m = pattern.match(url.path)
            if m:
                return handler(body, *m.groups())
        return self.status(404, "NotFound", "not found")

    def events(self, body, ns, name):
        with self.state.cv:
            if self.command == "POST" and name is None:
                obj = json.loads(body)
                self.state.created.add((ns, obj["metadata"]["name"]))
                return self.answer(201, obj)
            if self.command == "PATCH" and name is not None:
                if (ns, name) not in self.state.created:
                    return self.status(404, "NotFound", f'events "{name}" not found')
                return self.answer(200, json.loads(body))
        return self.status(405, "MethodNotAllowed", "method not allowed")

    def node_object(self, node):
        return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": node},
                "status": copy.deepcopy(self.state.node)}

    def node_get(self, body, node):
        if self.command != "GET":
            return self.status(405, "MethodNotAllowed", "method not allowed")
        with self.state.cv:
            return self.answer(200, self.node_object(node))

    def node_status(self, body, node):
        if self.command != "PATCH":
            return self.status(405, "MethodNotAllowed", "method not allowed")
        patch = json.loads(body)
        with self.state.cv:
            old = self.node_object(node)
            new = self.patched(old, patch)
            denied = self.admit("nodes", node, "", old, new)
            if denied:
                return self.status(denied.code, denied.reason, denied.message)
            self.state.node = new["status"]
            write_json(os.path.join(self.args.state, "node.json"), self.state.node)
            return self.answer(200, self.node_object(node))

    def pod_status(self, body, ns, name):
        patch = json.loads(body)
        with self.state.cv:
            pod = self.state.pods.get((ns, name))
            if pod is None:
                return self.status(404, "NotFound", f'pods "{name}" not found')
            uid = patch.get("metadata", {}).get("uid")
            if uid is not None and uid != pod["metadata"]["uid"]:
                return self.status(422, "Invalid", "metadata.uid: Invalid value: field is immutable")
            new = self.patched(pod, patch)
            denied = self.admit("pods", name, ns, pod, new)
            if denied:
                return self.status(denied.code, denied.reason, denied.message)
            pod.clear()
            pod.update(new)
            self.state.record("MODIFIED", pod)
            return self.answer(200, pod)

    @staticmethod
    def patched(old, patch):
        """The object after a status PATCH, as admission sees it: the patch merged, then the
        status subresource's rule that the spec stays as it was."""
        new = strategic_merge(copy.deepcopy(old), patch)
        if "spec" in old:
            new["spec"] = copy.deepcopy(old["spec"])
        return new

    def admit(self, resource, name, ns, old, new):
        """The Denied of the admission policies, or None (admitted; also without policies)."""
        if self.policies is None:
            return None
        node = self.args.token_node
        user = admission.user_info(SERVICE_ACCOUNT, {NODE_CLAIM: [node]} if node else None,
                                   ["system:serviceaccounts", "system:serviceaccounts:gpu-devwatch",
                                    "system:authenticated"])
        try:
            admission.admit(self.policies, admission.status_update(resource, name, old, new, user, ns))
        except admission.Denied as denied:
            return denied
        return None

    def list(self, query):
        node = query.get("fieldSelector", [""])[0].removeprefix("spec.nodeName=")
        limit = int(query.get("limit", ["0"])[0]) or 1 << 30
        if query.get("resourceVersion") == ["0"]:
            limit = 1 << 30  # the watch cache answers whole
        start = int(query.get("continue", ["0"])[0] or 0)
        with self.state.cv:
            pods = [p for p in self.state.pods.values() if p.get("spec", {}).get("nodeName") == node]
            page = pods[start:start + limit]
            more = start + limit < len(pods)
            meta = {"resourceVersion": str(self.state.rv)}
            if more:
                meta["continue"] = str(start + limit)
            return self.answer(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": page})

    def chunk(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def expired(self, rv):
        """Ends a watch from `rv` as the API server does once `rv` is compacted away."""
        self.chunk({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                "message": f"too old resource version: {rv}",
                                                "reason": "Expired", "code": 410}})
        self.wfile.write(b"0\r\n\r\n")

    def watch(self, query):
        node = query.get("fieldSelector", [""])[0].removeprefix("spec.nodeName=")
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        with self.state.cv:
            drops, expiries = self.state.drops, self.state.expiries
            if since < self.state.compacted:
                return self.expired(since)
            sent = since
            while True:
                if self.state.expiries != expiries:
                    return self.expired(sent)  # what it has not sent yet is lost to it
                if self.state.drops != drops or self.mode() != "ok":
                    return  # cut off (before what came with the cut): the connection just closes
                for rv, kind, pod in self.state.history:
                    if rv > sent and pod.get("spec", {}).get("nodeName") == node:
                        self.chunk({"type": kind, "object": pod})
                    sent = max(sent, rv)
                self.state.cv.wait(0.1)

    do_POST = handle_any
    do_PATCH = handle_any
    do_GET = handle_any


def main():
    p = argparse.ArgumentParser()
    for flag in ("--cert", "--key", "--port-file", "--log", "--state"):
        p.add_argument(flag, required=True)
    p.add_argument("--hang", action="store_true")
    p.add_argument("--admission-policy")
    p.add_argument("--token-node", default="")
    args = p.parse_args()
    state = State(args.state)
    Handler.state, Handler.args = state, args
    if args.admission_policy:
        import yaml  # only here: the server runs without PyYAML when no policy is asked for
        with open(args.admission_policy) as f:
            Handler.policies = admission.load(list(yaml.safe_load_all(f)))
    threading.Thread(target=state.poll_commands, daemon=True).start()
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
