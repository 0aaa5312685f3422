#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""What real fleets do to the policy server, from the robots' side (tests/libs/serve/test_serve_server.cpp
runs the server with a stand-in policy and checks its side): compression offered by default,
requests sent ahead, oversized messages, Origin headers, silent sockets that try to lock robots
out, and a hung robot. Every loop is bounded; traffic goes to 127.0.0.1 only.

  python fleet_clients.py CASE --port P [--max-message N] [--silent N]

Observations and prompts are openpi_clients.py's (the same deterministic robots).
"""

import argparse
import json
import os
import socket
import sys
import threading
import time
import zlib

import numpy as np
import websockets.exceptions
import websockets.sync.client
from openpi_client import msgpack_numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import openpi_clients as oc  # noqa: E402

fail = oc.fail


def close_code(e):
    return e.rcvd.code if e.rcvd is not None else None


def uri(args):
    return f"ws://127.0.0.1:{args.port}"


def sequential(args, client, n):
    """Requests 0..n-1 of a fresh connection, each waiting for its answer."""
    policy = oc.connect(args)
    out = [policy.infer(oc.observation(args.mapping, client, i))["actions"] for i in range(n)]
    policy._ws.close()
    return out


def masked_frame(first_byte, payload):
    """One client frame, written by hand (websockets will not set RSV1 without the extension)."""
    n = len(payload)
    head = bytes([first_byte])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + body


def case_deflate(args):
    """websockets offers permessage-deflate by default: the server must not take it (libsoup
    would inflate before the size check). A compressed frame sent anyway is a protocol error,
    not a message to inflate; and the plain client is served as always."""
    with websockets.sync.client.connect(uri(args), compression="deflate", max_size=None) as ws:
        ext = ws.response.headers.get("Sec-WebSocket-Extensions")
        if ext:
            fail(f"the server negotiated {ext!r}")
        ws.recv()  # metadata
        ws.send(oc.good_obs_bytes(args))
        answer = msgpack_numpy.unpackb(ws.recv(timeout=60))
        if "actions" not in answer:
            fail("no actions over a connection that offered compression")
    # A deflate bomb in one frame with RSV1 set: 64 MiB of zeros in ~64 KiB.
    ws = oc.raw(args)
    ws.recv()
    bomb = zlib.compressobj(9, zlib.DEFLATED, -15)
    payload = bomb.compress(b"\0" * (64 << 20)) + bomb.flush(zlib.Z_SYNC_FLUSH)
    ws.socket.sendall(masked_frame(0x80 | 0x40 | 0x2, payload))  # FIN, RSV1, binary
    try:
        msg = ws.recv(timeout=60)
        fail(f"a compressed frame was taken as a message: {type(msg)}")
    except websockets.exceptions.ConnectionClosed as e:
        code = close_code(e)
        if code not in (1002, None):
            fail(f"a compressed frame closed with {code}, expected 1002 (protocol error)")
    print(json.dumps({"deflate": "refused", "bomb_wire_bytes": len(payload)}))


def case_ahead(args):
    """Three requests sent before any answer (a robot that pipelines): openpi answers each, in
    order; so must this server, with the answers a waiting client gets."""
    expect = sequential(args, 4, 3)
    ws = oc.raw(args)
    ws.recv()
    for n in range(3):
        ws.send(msgpack_numpy.packb(oc.observation(args.mapping, 4, n)))
    for n in range(3):
        msg = ws.recv(timeout=60)
        if isinstance(msg, str):
            fail(f"request {n} sent ahead got an error: {msg}")
        got = msgpack_numpy.unpackb(msg)["actions"]
        if not np.array_equal(got, expect[n]):
            fail(f"the answer to request {n} sent ahead differs from the one a waiting client gets")
    ws.close()
    print(json.dumps({"ahead": 3}))


def case_oversize(args):
    """A message over the limit, in one frame and in fragments: a close frame with 1009 (message
    too big) and a reason, as websockets sends it, not a dropped connection."""
    seen = {}
    for name in ("frame", "fragments"):
        ws = oc.raw(args)
        ws.recv()
        try:
            if name == "frame":
                # Far more than the socket buffers hold: the server must read the rest away
                # rather than reset the connection under the close frame.
                ws.send(b"\0" * (args.max_message * 64))
            else:
                chunk = b"\0" * 4096
                ws.send(chunk for _ in range(args.max_message // len(chunk) * 4))
            ws.recv(timeout=60)
            fail(f"oversized ({name}): the connection stayed open")
        except websockets.exceptions.ConnectionClosed as e:
            if close_code(e) != 1009:
                fail(f"oversized ({name}): closed with {e.rcvd}, expected 1009 with a reason")
            seen[name] = e.rcvd.reason
    print(json.dumps(seen))


def case_origin(args):
    """websocket-client sends 'Origin: http://HOST:PORT' by default (the host it connects to):
    served. A web page of another site sends its own origin: 403."""
    ws = oc.raw(args, {"Origin": f"http://127.0.0.1:{args.port}"})
    ws.recv()
    ws.send(oc.good_obs_bytes(args))
    if "actions" not in msgpack_numpy.unpackb(ws.recv(timeout=60)):
        fail("no actions for a client with its own host as Origin")
    ws.close()
    for origin in ("http://example.com", f"http://127.0.0.1:{args.port}.evil.example",
                   "null"):
        try:
            oc.raw(args, {"Origin": origin})
            fail(f"Origin {origin!r} was upgraded")
        except websockets.exceptions.InvalidStatus as e:
            if e.response.status_code != 403:
                fail(f"Origin {origin!r}: HTTP {e.response.status_code}, expected 403")
    print(json.dumps({"origin": "ok"}))


def case_lockout(args):
    """--silent sockets that never finish a handshake (half of them trickle a byte of a request
    line now and then, slowloris), reopened whenever the server cuts one, while a robot connects
    and asks 20 times: every try must succeed."""
    import resource

    # A flood larger than the server's open-file limit needs a client with a larger one.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.silent + 256 <= hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.silent + 256, hard))
    stop = threading.Event()
    opened = [0]

    def attacker(i):
        while not stop.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", args.port), timeout=5)
            except OSError:
                time.sleep(0.05)
                continue
            opened[0] += 1
            s.settimeout(0.2)
            try:
                line = b"GET / HTTP/1.1\r\nHost: x\r\n"
                k = 0
                while not stop.is_set():
                    if i % 2 and k < len(line):
                        s.send(line[k:k + 1])
                        k += 1
                    try:
                        if s.recv(1) == b"":
                            break  # cut by the server: reopen
                    except socket.timeout:
                        pass
            except OSError:
                pass
            finally:
                s.close()

    threads = [threading.Thread(target=attacker, args=(i,), daemon=True) for i in range(args.silent)]
    for t in threads:
        t.start()
    time.sleep(1.5)  # every silent socket is open, the oldest past the eviction age
    ok = 0
    errors = []
    for n in range(20):
        try:
            sequential(args, 6, 1)
            ok += 1
        except Exception as e:  # noqa: BLE001 (any failure is a lock-out)
            errors.append(repr(e)[:120])
    stop.set()
    for t in threads:
        t.join(timeout=10)
    if ok != 20:
        fail(f"{ok}/20 robot connections succeeded among {args.silent} silent sockets: {errors[:3]}")
    print(json.dumps({"robot": f"{ok}/20", "silent_opened": opened[0]}))


def case_hung(args):
    """A robot whose TCP stays up but which answers nothing (no pongs): after the upgrade it
    never reads or writes. The server must close it; this checks it sees the end of the stream
    within a bounded wait, having answered no ping."""
    s = socket.create_connection(("127.0.0.1", args.port), timeout=5)
    s.sendall(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    if b" 101 " not in head.split(b"\r\n")[0]:
        fail(f"no upgrade: {head[:80]!r}")
    print("upgraded", flush=True)
    time.sleep(args.hang)  # hung: pings pile up unread
    s.settimeout(1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if s.recv(65536) == b"":
                print(json.dumps({"hung": "closed by the server"}))
                return
        except socket.timeout:
            continue
        except ConnectionResetError:
            print(json.dumps({"hung": "reset by the server"}))
            return
    fail("the server kept a session that answered no ping")


def case_inputs(args):
    """What openpi's policies take that a strict reading would refuse: float images in [0, 1]
    (openpi's _parse_image makes them (255 * image).astype(uint8)) get the answer of those uint8
    images; a float image outside [0, 1] and a prompt with a NUL are refused, each with its
    reason."""
    obs = oc.observation(args.mapping, 8, 0)
    as_float = {}
    as_uint8 = {}
    for k, v in obs["images"].items():
        f = (v.astype(np.float64) / 255.0 + 0.001).clip(0, 1).astype(np.float32 if k != "cam_high" else np.float64)
        as_float[k] = f
        as_uint8[k] = (255 * f).astype(np.uint8)  # openpi's own conversion
    answers = []
    for images in (as_uint8, as_float):
        policy = oc.connect(args)
        o = dict(obs)
        o["images"] = images
        answers.append(policy.infer(o)["actions"])
        policy._ws.close()
    if not np.array_equal(answers[0], answers[1]):
        fail("float images do not get the answer of openpi's uint8 conversion of them")
    seen = {}
    for name, change in (
        ("float_out_of_range", lambda o: o["images"].__setitem__("cam_high", as_float["cam_high"] * 2)),
        ("nul_prompt", lambda o: o.__setitem__("prompt", "pick\0up")),
    ):
        o = dict(obs)
        o["images"] = dict(as_float)
        change(o)
        ws = oc.raw(args)
        ws.recv()
        seen[name] = oc.expect_error(ws, name, payload=msgpack_numpy.packb(o))
    if "[0, 1]" not in seen["float_out_of_range"]:
        fail(f"float image out of range: unclear error {seen['float_out_of_range']}")
    if "NUL" not in seen["nul_prompt"]:
        fail(f"NUL in the prompt: unclear error {seen['nul_prompt']}")
    print(json.dumps(seen))


def case_seeds(args):
    """--requests times the same observation on one connection (with its own "seed" when
    --send-seed is given), then once more on a second connection; prints each chunk's sha256, for
    the C++ side to compare across servers, connections and restarts."""
    import hashlib

    obs = oc.observation(args.mapping, 9, 0)
    if args.send_seed is not None:
        obs["seed"] = args.send_seed
    out = {}
    for conn in ("first", "second"):
        policy = oc.connect(args)
        n = args.requests if conn == "first" else 1
        out[conn] = [hashlib.sha256(np.ascontiguousarray(policy.infer(obs)["actions"]).tobytes()).hexdigest()
                     for _ in range(n)]
        policy._ws.close()
    print("CHUNKS " + json.dumps(out), flush=True)


def case_drain(args):
    """The server drains while robot A's request is in flight (the C++ side's policy starts the
    drain when it takes that request): A gets its answer, then close 1001; robot B, idle, is
    closed with 1001 at once; a new robot finds the port closed."""
    b = oc.raw(args)
    b.recv()
    a = oc.raw(args)
    a.recv()
    a.send(oc.good_obs_bytes(args, client=2))
    answer = a.recv(timeout=60)
    if isinstance(answer, str) or "actions" not in msgpack_numpy.unpackb(answer):
        fail(f"the request in flight during the drain was not answered: {answer!r}"[:200])
    codes = {}
    for name, ws in (("in_flight", a), ("idle", b)):
        try:
            ws.recv(timeout=60)
            fail(f"{name}: a message instead of the close")
        except websockets.exceptions.ConnectionClosed as e:
            codes[name] = close_code(e)
            if codes[name] != 1001:
                fail(f"{name}: closed with {e.rcvd}, expected 1001 (going away)")
    try:
        socket.create_connection(("127.0.0.1", args.port), timeout=5).close()
        fail("a new robot could connect to a draining server")
    except ConnectionRefusedError:
        pass
    print(json.dumps(codes))


# The robot-side reconnect recipe of docs/serve.md ("Rolling restarts"), as written there.
def connect_again(args):
    while True:
        try:
            return oc.connect(args)
        except (OSError, websockets.exceptions.InvalidStatus):  # refused, or 503 while draining
            time.sleep(0.5)


def case_reconnect(args):
    """A robot asking every 0.1 s with docs/serve.md's reconnect recipe while its server drains,
    stops, and another takes the port: every request gets an answer."""
    policy = connect_again(args)
    reconnects = 0
    obs = oc.observation(args.mapping, 3, 0)
    for n in range(args.requests):
        for _ in range(3):
            try:
                policy.infer(obs)
                break
            except websockets.exceptions.ConnectionClosed:  # 1001: the replica drained
                reconnects += 1
                policy = connect_again(args)
        else:
            fail(f"request {n}: no answer after 3 reconnects")
        print(f"answered {n}", flush=True)
        time.sleep(0.1)
    if reconnects < 1:
        fail("the server never went away")
    print(json.dumps({"requests": args.requests, "reconnects": reconnects}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["deflate", "ahead", "oversize", "origin", "lockout", "hung", "inputs", "seeds", "drain", "reconnect"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mapping", default="aloha")
    p.add_argument("--api-key", default=None)
    p.add_argument("--max-message", type=int, default=16 << 20)
    p.add_argument("--silent", type=int, default=24)
    p.add_argument("--hang", type=float, default=3)
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--send-seed", type=int, default=None)
    args = p.parse_args()
    {
        "deflate": case_deflate,
        "ahead": case_ahead,
        "oversize": case_oversize,
        "origin": case_origin,
        "lockout": case_lockout,
        "hung": case_hung,
        "inputs": case_inputs,
        "seeds": case_seeds,
        "drain": case_drain,
        "reconnect": case_reconnect,
    }[args.case](args)


if __name__ == "__main__":
    main()
