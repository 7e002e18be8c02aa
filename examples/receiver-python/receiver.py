#!/usr/bin/env python3
"""An example receiver of Stampede's HTTP outlet (serve worker --deliver).

Standard library only. For every POST it:

  1. reads the body (at most 64 KiB);
  2. checks the Stampede-Signature header, "t=<unix>,v1=<hex>", where the
     hex is the HMAC-SHA256 of "<t>.<body>" under the shared secret, and
     that <t> is within --tolerance seconds of its clock (401 otherwise);
  3. checks that Idempotency-Key is "<payment_id>-<seq>" of the body (400);
  4. in one SQLite transaction: skips the event if its Idempotency-Key is
     in the inbox, else records the key, applies the effect (the order's
     latest status) and appends the event to the "applied" log;
  5. answers 204 (a duplicate is answered 204 too: it was applied before).

The SQLite file (--db) keeps the inbox across restarts, so an event
redelivered after a restart is still applied once. The "applied" log keeps
the order events were applied in, which `--dump` prints as JSON lines.

For tests: --fail-rate F answers 500 to a fraction F of the calls before
touching anything, and --lost-answer-rate F applies the event and then
answers 500 (the answer "lost"), so the outlet sends it again.

Usage:
  STAMPEDE_DELIVER_SECRET=... python3 receiver.py --port 23001 --db receiver.db
  python3 receiver.py --db receiver.db --dump
"""

import argparse
import hashlib
import hmac
import json
import os
import random
import signal
import sqlite3
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 << 10

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
    idempotency_key TEXT PRIMARY KEY,
    received_at     REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS applied (
    n          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id   TEXT NOT NULL UNIQUE,
    payment_id TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT NOT NULL,
    status     TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS orders (
    order_id   TEXT PRIMARY KEY,
    payment_id TEXT NOT NULL,
    status     TEXT NOT NULL,
    seq        INTEGER NOT NULL
);
"""


def verify_signature(secret, header, body, now, tolerance):
    """Return None if header signs body under secret within tolerance
    seconds of now, else the reason it does not."""
    ts, sigs = None, []
    for part in header.split(","):
        k, _, v = part.strip().partition("=")
        if k == "t":
            ts = v
        elif k == "v1":
            sigs.append(v)
    if ts is None or not ts.isdigit() or not sigs:
        return "malformed signature header"
    want = hmac.new(secret, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(want, s) for s in sigs):
        return "signature does not match"
    if abs(now - int(ts)) > tolerance:
        return "signature timestamp outside the tolerance"
    return None


class Store:
    """The inbox, the effect and the applied log, in one SQLite file."""

    def __init__(self, path):
        self.lock = threading.Lock()
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # a process crash loses nothing committed
        self.db.executescript(SCHEMA)

    def apply(self, key, event):
        """Apply event once; return True if applied now, False if it was
        applied before."""
        with self.lock:
            cur = self.db.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.execute("INSERT OR IGNORE INTO inbox(idempotency_key, received_at) VALUES (?, ?)",
                            (key, time.time()))
                if cur.rowcount == 0:
                    cur.execute("ROLLBACK")
                    return False
                cur.execute("INSERT INTO applied(event_id, payment_id, seq, type, status) VALUES (?, ?, ?, ?, ?)",
                            (key, event["payment_id"], event["seq"], event.get("type", ""), event["status"]))
                if event.get("order_id"):
                    cur.execute("""INSERT INTO orders(order_id, payment_id, status, seq) VALUES (?, ?, ?, ?)
                                   ON CONFLICT(order_id) DO UPDATE SET status = excluded.status, seq = excluded.seq""",
                                (event["order_id"], event["payment_id"], event["status"], event["seq"]))
                cur.execute("COMMIT")
                return True
            except BaseException:
                cur.execute("ROLLBACK")
                raise

    def dump(self, out):
        for row in self.db.execute("SELECT n, event_id, payment_id, seq, type, status FROM applied ORDER BY n"):
            out.write(json.dumps(dict(zip(("n", "event_id", "payment_id", "seq", "type", "status"), row))) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stampede-receiver-example/1"

    def log_message(self, fmt, *args):  # quiet: one line per call is too much at 10,000 events
        if self.server.verbose:
            super().log_message(fmt, *args)

    def answer(self, code, reason=""):
        body = (json.dumps({"error": reason}) + "\n").encode() if reason else b""
        self.send_response(code)
        if body:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        srv = self.server
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self.answer(411, "Content-Length required")
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            return self.answer(413, "body larger than %d bytes" % MAX_BODY)
        body = self.rfile.read(length)
        if len(body) != length:
            self.close_connection = True
            return self.answer(400, "body shorter than its Content-Length")
        reason = verify_signature(srv.secret, self.headers.get("Stampede-Signature", ""), body, time.time(),
                                  srv.tolerance)
        if reason:
            srv.count("refused")
            return self.answer(401, reason)
        try:
            event = json.loads(body)
            key = "%s-%d" % (event["payment_id"], event["seq"])
            event["status"]  # noqa: B018 -- required
        except (ValueError, KeyError, TypeError):
            return self.answer(400, "body is not a payment event")
        if self.headers.get("Idempotency-Key") != key:
            return self.answer(400, "Idempotency-Key must be <payment_id>-<seq> of the body, %s" % key)
        if srv.rand.random() < srv.fail_rate:
            srv.count("failed")
            return self.answer(500, "failing on purpose (--fail-rate)")
        applied = srv.store.apply(key, event)
        srv.count("applied" if applied else "duplicate")
        if srv.rand.random() < srv.lost_answer_rate:
            srv.count("lost")
            return self.answer(500, "applied, answering 500 on purpose (--lost-answer-rate)")
        self.answer(204)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, secret, store, tolerance, fail_rate, lost_answer_rate, verbose):
        super().__init__(addr, Handler)
        self.secret, self.store, self.tolerance = secret, store, tolerance
        self.fail_rate, self.lost_answer_rate, self.verbose = fail_rate, lost_answer_rate, verbose
        self.rand = random.Random()
        self.counts = {}
        self.counts_lock = threading.Lock()

    def handle_error(self, request, client_address):
        """A client that closes its keep-alive connection is no error."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)

    def count(self, what):
        with self.counts_lock:
            self.counts[what] = self.counts.get(what, 0) + 1


def stop(signum, frame):
    """On SIGTERM, stop as on Ctrl-C: print the counts and exit."""
    raise KeyboardInterrupt


def main():
    p = argparse.ArgumentParser(description="Example receiver of Stampede's HTTP outlet.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8090, help="0 picks a free port (printed on start)")
    p.add_argument("--db", default="receiver.db", help="SQLite file of the inbox and the applied log")
    p.add_argument("--tolerance", type=int, default=300, help="seconds a signature's timestamp may be off")
    p.add_argument("--fail-rate", type=float, default=0.0, help="fraction of calls answered 500 before applying")
    p.add_argument("--lost-answer-rate", type=float, default=0.0,
                   help="fraction of calls answered 500 after applying (the answer is lost)")
    p.add_argument("--dump", action="store_true", help="print the applied log as JSON lines and exit")
    p.add_argument("--verbose", action="store_true", help="log every request")
    a = p.parse_args()
    store = Store(a.db)
    if a.dump:
        store.dump(sys.stdout)
        return
    secret = os.environ.get("STAMPEDE_DELIVER_SECRET", "")
    if not secret:
        sys.exit("receiver: STAMPEDE_DELIVER_SECRET must hold the secret serve worker --deliver signs with")
    srv = Server((a.host, a.port), secret.encode(), store, a.tolerance, a.fail_rate, a.lost_answer_rate, a.verbose)
    signal.signal(signal.SIGTERM, stop)
    print("listening on %s:%d" % srv.server_address[:2], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        print("counts %s" % json.dumps(srv.counts, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
