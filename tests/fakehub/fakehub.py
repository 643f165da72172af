#!/usr/bin/env python3
"""A local stand-in for the Hugging Face Hub, for redwing install tests (standard library only).

Serves one repository from a directory, with the Hub's API shapes:
  GET /api/models/{repo}/revision/{rev}             {"id", "sha", "siblings": [{"rfilename"}]}
  GET /api/models/{repo}/tree/{rev}?recursive=true  [{"type", "path", "size", "oid", "lfs"}]
                                                    (paginated with a Link rel="next" header)
  GET|HEAD /{repo}/resolve/{rev}/{path}             non-LFS files served here (Range, ETag,
                                                    X-Repo-Commit); LFS files (*.safetensors,
                                                    tokenizer.json) 302 to the "CDN" server
A third server is a forward HTTP proxy to both (for the standard proxy variables).
A second server plays the CDN on another port, and redirects name it by a different host name
("localhost" vs the hub's 127.0.0.1), so a client that leaks the Authorization header across the
redirect is caught: the CDN counts such requests (stats "cdn_auth_leaks") and answers 400.

Control (hub port, no auth):
  POST /_control/faults   JSON list of fault rules (replaces the current list)
  POST /_control/config   {"throttle": bytes_per_second}  (0: unlimited)
  GET  /_control/stats    counters: requests, bytes per file, faults fired, auth leaks, and
                          timestamped logs of requests ([t, server, path]) and faults fired
                          ([t, server, file, kind])
  POST /_control/reset    zero the counters
A fault rule: {"kind": status|drop|truncate|corrupt|stall|ignore_range|bad_range,
  "path": substring of the file path (default: any), "server": hub|cdn|any (default any),
  "count": times to fire (default 1, -1: always), "min_offset": only ranges starting at or after,
  "status": 503, "retry_after": "1", "after": bytes sent before a drop/stall, "seconds": stall}.

Usage: fakehub.py --repo-dir DIR --repo-id owner/name --port-file FILE [--commit SHA]
       [--branch main] [--token T] [--tree-page-size N] [--throttle B] [--lifetime S]
"""
import argparse
import hashlib
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
STATE = {"faults": [], "throttle": 0}
STATS = {}


def reset_stats():
    STATS.clear()
    STATS.update({"hub_requests": 0, "cdn_requests": 0, "cdn_auth_leaks": 0, "hub_auth_ok": 0,
                  "hub_auth_missing": 0, "bytes": {}, "faults_fired": {}, "ranges": 0,
                  "requests_log": [], "fault_log": [], "proxy_requests": 0})


MAX_LOG = 20000


def log_request(server, path):
    with LOCK:
        if len(STATS["requests_log"]) < MAX_LOG:
            STATS["requests_log"].append([time.time(), server, path])


reset_stats()


def is_lfs(path):
    return path.endswith(".safetensors") or os.path.basename(path) == "tokenizer.json"


class Repo:
    def __init__(self, root, repo_id, commit, branch):
        self.root, self.repo_id, self.commit, self.branch = root, repo_id, commit, branch
        self.files = {}
        self.by_sha = {}
        for dirpath, _, names in os.walk(root):
            for n in sorted(names):
                full = os.path.join(dirpath, n)
                rel = os.path.relpath(full, root)
                size = os.path.getsize(full)
                sha, git = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
                with open(full, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        sha.update(chunk)
                        git.update(chunk)
                entry = {"path": rel, "size": size, "full": full, "sha256": sha.hexdigest(),
                         "oid": git.hexdigest(), "lfs": is_lfs(rel)}
                self.files[rel] = entry
                self.by_sha[entry["sha256"]] = entry

    def rev_ok(self, rev):
        return rev in (self.commit, self.branch)

    def tree(self):
        out = []
        for rel in sorted(self.files):
            e = self.files[rel]
            item = {"type": "file", "oid": e["oid"], "size": e["size"], "path": rel}
            if e["lfs"]:
                item["lfs"] = {"oid": e["sha256"], "size": e["size"], "pointerSize": 134}
            out.append(item)
        return out


def take_fault(server, path, offset):
    with LOCK:
        for rule in STATE["faults"]:
            if rule.get("count", 1) == 0:
                continue
            if rule.get("server", "any") not in ("any", server):
                continue
            if rule.get("path", "") not in path:
                continue
            if offset < rule.get("min_offset", 0):
                continue
            if rule.get("count", 1) > 0:
                rule["count"] = rule.get("count", 1) - 1
            kind = rule["kind"]
            STATS["faults_fired"][kind] = STATS["faults_fired"].get(kind, 0) + 1
            if len(STATS["fault_log"]) < MAX_LOG:
                STATS["fault_log"].append([time.time(), server, path, kind])
            return dict(rule)
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_role = "hub"

    def log_message(self, fmt, *args):  # quiet
        pass

    def send_json(self, code, obj, headers=None):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def do_POST(self):
        repo = self.server.repo
        if self.path == "/_control/faults":
            rules = json.loads(self.read_body() or b"[]")
            with LOCK:
                STATE["faults"] = rules
            return self.send_json(200, {"ok": True})
        if self.path == "/_control/config":
            cfg = json.loads(self.read_body() or b"{}")
            with LOCK:
                STATE.update(cfg)
            return self.send_json(200, {"ok": True})
        if self.path == "/_control/reset":
            self.read_body()
            with LOCK:
                reset_stats()
            return self.send_json(200, {"ok": True})
        self.send_json(404, {"error": "not found"})

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        if not self.path.startswith("/_control/"):
            log_request(self.server_role, self.path)
        try:
            if self.server_role == "cdn":
                return self.cdn_get()
            return self.hub_get()
        except (BrokenPipeError, ConnectionResetError):
            pass

    # ---- hub ----
    def hub_get(self):
        repo = self.server.repo
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        if path == "/_control/stats":
            with LOCK:
                return self.send_json(200, STATS)
        with LOCK:
            STATS["hub_requests"] += 1
        token = self.server.token
        if token:
            if self.headers.get("Authorization") != "Bearer " + token:
                with LOCK:
                    STATS["hub_auth_missing"] += 1
                return self.send_json(401, {"error": "Invalid credentials in Authorization header"})
            with LOCK:
                STATS["hub_auth_ok"] += 1
        api = "/api/models/" + repo.repo_id + "/"
        if path.startswith(api):
            rest = path[len(api):]
            kind, _, rev = rest.partition("/")
            rev = urllib.parse.unquote(rev)
            if not repo.rev_ok(rev):
                return self.send_json(404, {"error": "Invalid rev id: " + rev},
                                      {"X-Error-Code": "RevisionNotFound"})
            if kind == "revision":
                return self.send_json(200, {"_id": "fake", "id": repo.repo_id,
                                            "modelId": repo.repo_id, "sha": repo.commit,
                                            "private": False,
                                            "siblings": [{"rfilename": p} for p in sorted(repo.files)]})
            if kind == "tree":
                q = urllib.parse.parse_qs(url.query)
                items = repo.tree()
                page = self.server.tree_page_size
                start = int(q.get("cursor", ["0"])[0])
                headers = {}
                if page > 0:
                    if start + page < len(items):
                        nxt = "http://%s/api/models/%s/tree/%s?recursive=true&cursor=%d" % (
                            self.headers.get("Host"), repo.repo_id, rev, start + page)
                        headers["Link"] = '<%s>; rel="next"' % nxt
                    items = items[start:start + page]
                return self.send_json(200, items, headers)
            return self.send_json(404, {"error": "unknown api"})
        prefix = "/" + repo.repo_id + "/resolve/"
        if not path.startswith(prefix):
            return self.send_json(404, {"error": "Repository not found"},
                                  {"X-Error-Code": "RepoNotFound"})
        rev, _, fpath = path[len(prefix):].partition("/")
        rev, fpath = urllib.parse.unquote(rev), urllib.parse.unquote(fpath)
        if not repo.rev_ok(rev):
            return self.send_json(404, {"error": "Invalid rev id"}, {"X-Error-Code": "RevisionNotFound"})
        entry = repo.files.get(fpath)
        if entry is None:
            return self.send_json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        common = {"X-Repo-Commit": repo.commit}
        if entry["lfs"]:
            cdn = "http://%s:%d/cdn/%s?file=%s" % (self.server.cdn_host, self.server.cdn_port,
                                                   entry["sha256"], urllib.parse.quote(fpath))
            common.update({"Location": cdn, "ETag": '"%s"' % entry["sha256"],
                           "X-Linked-Etag": '"%s"' % entry["sha256"],
                           "X-Linked-Size": str(entry["size"])})
            self.send_response(302)
            for k, v in common.items():
                self.send_header(k, v)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        common["ETag"] = '"%s"' % entry["oid"]
        self.serve_file(entry, "hub", common)

    # ---- cdn ----
    def cdn_get(self):
        repo = self.server.repo
        url = urllib.parse.urlsplit(self.path)
        with LOCK:
            STATS["cdn_requests"] += 1
            if "Authorization" in self.headers:
                STATS["cdn_auth_leaks"] += 1
                leak = True
            else:
                leak = False
        if leak:
            return self.send_json(400, {"error": "Authorization header sent to the CDN"})
        parts = url.path.split("/")
        entry = repo.by_sha.get(parts[-1]) if len(parts) == 3 and parts[1] == "cdn" else None
        if entry is None:
            return self.send_json(404, {"error": "no such object"})
        self.serve_file(entry, "cdn", {"ETag": '"%s"' % entry["sha256"]})

    def serve_file(self, entry, role, headers):
        size = entry["size"]
        rng = self.headers.get("Range")
        first, last, partial = 0, size - 1, False
        if rng:
            spec = rng.strip()
            ok = spec.startswith("bytes=") and "," not in spec
            if ok:
                a, _, b = spec[6:].partition("-")
                try:
                    if a == "":
                        first, last = max(0, size - int(b)), size - 1
                    else:
                        first = int(a)
                        last = min(int(b), size - 1) if b else size - 1
                    ok = first <= last and first < size
                except ValueError:
                    ok = False
            if not ok:
                return self.send_json(416, {"error": "bad range"}, {"Content-Range": "bytes */%d" % size})
            partial = True
        fault = take_fault(role, entry["path"], first) if self.command == "GET" else None
        kind = fault["kind"] if fault else None
        if kind == "status":
            h = {}
            if fault.get("retry_after") is not None:
                h["Retry-After"] = str(fault["retry_after"])
            return self.send_json(fault.get("status", 503), {"error": "injected"}, h)
        if kind == "ignore_range":
            first, last, partial = 0, size - 1, False
        n = last - first + 1
        with open(entry["full"], "rb") as f:
            f.seek(first)
            body = bytearray(f.read(n))
        if kind == "corrupt" and body:
            body[fault.get("at", len(body) // 2) % len(body)] ^= 0xFF
        self.send_response(206 if partial else 200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Accept-Ranges", "bytes")
        if partial:
            shift = 1 if kind == "bad_range" else 0
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first + shift, last + shift, size))
        send_len = n
        if kind == "truncate":
            send_len = max(0, n // 2)
        self.send_header("Content-Length", str(send_len))
        self.end_headers()
        if self.command == "HEAD":
            return
        with LOCK:
            STATS["ranges"] += 1 if partial else 0
        if kind in ("drop", "stall"):
            cut = min(fault.get("after", n // 2), n)
            self.send_body(body[:cut], entry["path"])
            self.wfile.flush()
            if kind == "stall":
                time.sleep(fault.get("seconds", 5))
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        self.send_body(body[:send_len], entry["path"])

    def send_body(self, body, path):
        throttle = STATE.get("throttle", 0)
        view = memoryview(bytes(body))
        step = 64 * 1024
        for off in range(0, len(view), step):
            chunk = view[off:off + step]
            self.wfile.write(chunk)
            with LOCK:
                STATS["bytes"][path] = STATS["bytes"].get(path, 0) + len(chunk)
            if throttle:
                time.sleep(len(chunk) / throttle)


class ProxyHandler(Handler):
    """A forward HTTP proxy in front of the hub and the CDN: takes absolute-form requests
    ("GET http://host:port/path") and answers them as the server on that port would."""
    server_role = "proxy"

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        if not u.scheme or u.port not in (self.server.hub_port, self.server.cdn_port):
            return self.send_json(400, {"error": "not a proxy request for the fake hub"})
        with LOCK:
            STATS["proxy_requests"] += 1
        self.server_role = "cdn" if u.port == self.server.cdn_port else "hub"
        self.path = u.path + ("?" + u.query if u.query else "")
        return Handler.do_GET(self)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo-dir", required=True)
    ap.add_argument("--repo-id", required=True)
    ap.add_argument("--commit", default="3f1c0de5a1b2c3d4e5f60718293a4b5c6d7e8f90")
    ap.add_argument("--branch", default="main")
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--token", default="")
    ap.add_argument("--cdn-host", default="localhost")
    ap.add_argument("--tree-page-size", type=int, default=0)
    ap.add_argument("--throttle", type=int, default=0)
    ap.add_argument("--lifetime", type=float, default=900)
    args = ap.parse_args()
    STATE["throttle"] = args.throttle
    repo = Repo(args.repo_dir, args.repo_id, args.commit, args.branch)

    class HubHandler(Handler):
        server_role = "hub"

    class CdnHandler(Handler):
        server_role = "cdn"

    hub = Server(("127.0.0.1", 0), HubHandler)
    cdn = Server(("127.0.0.1", 0), CdnHandler)
    proxy = Server(("127.0.0.1", 0), ProxyHandler)
    for s in (hub, cdn, proxy):
        s.repo, s.token, s.tree_page_size = repo, args.token, args.tree_page_size
        s.cdn_host, s.cdn_port = args.cdn_host, cdn.server_address[1]
        s.hub_port = hub.server_address[1]
    for s in (hub, cdn, proxy):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"hub": hub.server_address[1], "cdn": cdn.server_address[1],
                   "proxy": proxy.server_address[1]}, f)
    os.rename(tmp, args.port_file)
    # Stop by ourselves: when the parent (the test) goes away, or after --lifetime seconds.
    parent, deadline = os.getppid(), time.time() + args.lifetime
    while os.getppid() == parent and time.time() < deadline:
        time.sleep(0.2)
    os._exit(0)


if __name__ == "__main__":
    main()
