#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Robots for the policy server tests: openpi-client's WebsocketClientPolicy, unchanged (and, for
the bad cases, raw websockets), against a running pi0servesrc/pi0servesink server.

Each case checks what it can see from the robot's side and exits 0 when everything held, 1 with
a message otherwise. The C++ tests (tests/pipelines/test_pipelines_serve.cpp, tests/tools/test_pi0_serve.cpp) runs the server, starts a case, and
checks the server's side (stats, open file descriptors, leaks).

  python openpi_clients.py CASE --port P [--mapping aloha] [--api-key K] [--out DIR] ...

Observations are deterministic: client c's request n is built from numpy's RandomState(1000 * c
+ n), in the mapping's layout (ALOHA's images CHW, DROID's and LIBERO's HWC), with image sizes
that differ between clients and from the model's input (cudaprep resizes), and a prompt of its
own per client.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

import msgpack
import numpy as np
import websockets.exceptions
import websockets.sync.client
from openpi_client import msgpack_numpy
from openpi_client import websocket_client_policy

ACTION_DIM = {"aloha": 14, "droid": 8, "libero": 7}
TOL = 1e-5


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def image(rng, h, w, chw):
    img = rng.randint(0, 256, size=(h, w, 3), dtype=np.uint8)
    return np.ascontiguousarray(img.transpose(2, 0, 1)) if chw else img


def observation(mapping, client, n):
    rng = np.random.RandomState(1000 * client + n)
    h, w = 24 + 8 * (client % 4), 40 + 4 * (client % 3)
    prompt = f"task {client}: pick up the {['red', 'blue', 'green'][client % 3]} cube"
    if mapping == "aloha":
        return {
            "images": {
                "cam_high": image(rng, h, w, True),
                "cam_low": image(rng, h, w, True),
                "cam_left_wrist": image(rng, h // 2 + 3, w // 2 + 5, True),
                "cam_right_wrist": image(rng, h, w, True),
            },
            "state": rng.uniform(-1, 1, size=14),
            "prompt": prompt,
        }
    if mapping == "droid":
        return {
            "observation/exterior_image_1_left": image(rng, h, w, False),
            "observation/wrist_image_left": image(rng, h + 5, w + 1, False),
            "observation/joint_position": rng.uniform(-1, 1, size=7),
            "observation/gripper_position": rng.uniform(0, 1, size=1),
            "prompt": prompt,
        }
    if mapping == "libero":
        return {
            "observation/image": image(rng, h, w, False),
            "observation/wrist_image": image(rng, h, w, False),
            "observation/state": rng.uniform(-1, 1, size=8),
            "prompt": prompt,
        }
    fail("unknown mapping " + mapping)


def connect(args, api_key=None):
    return websocket_client_policy.WebsocketClientPolicy(
        host="127.0.0.1", port=args.port, api_key=api_key if api_key is not None else args.api_key
    )


def check_answer(args, answer, first):
    a = answer.get("actions")
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != 2:
        fail(f"actions must be a float32 [H,D] array, got {type(a)} {getattr(a, 'dtype', None)}")
    if a.shape[1] != ACTION_DIM[args.mapping]:
        fail(f"actions have {a.shape[1]} columns, the {args.mapping} mapping sends {ACTION_DIM[args.mapping]}")
    if not np.all(np.isfinite(a)):
        fail("non-finite actions")
    st = answer.get("server_timing")
    if not isinstance(st, dict) or not st.get("infer_ms", -1) >= 0:
        fail(f"server_timing.infer_ms missing: {st}")
    if not first and "prev_total_ms" not in st:
        fail(f"server_timing.prev_total_ms missing after the first request: {st}")
    if first and "prev_total_ms" in st:
        fail("prev_total_ms on the first request")
    pt = answer.get("policy_timing")
    if not isinstance(pt, dict) or not pt.get("infer_ms", -1) >= 0:
        fail(f"policy_timing.infer_ms missing: {pt}")
    return a


def run_client(args, client, requests, out=None):
    """A fresh connection: client's requests 0..requests-1. Returns the action chunks."""
    policy = connect(args)
    chunks = []
    for n in range(requests):
        obs = observation(args.mapping, client, n)
        ans = policy.infer(obs)
        chunks.append(check_answer(args, ans, n == 0))
        if out is not None:
            out.append((obs, chunks[-1]))
    policy._ws.close()
    return chunks


def case_one(args):
    policy = connect(args)
    meta = policy.get_server_metadata()
    if not isinstance(meta, dict):
        fail(f"metadata must be a dict, got {meta!r}")
    if args.expect_metadata is not None and meta != json.loads(args.expect_metadata):
        fail(f"metadata {meta} != {args.expect_metadata}")
    policy._ws.close()
    record = []
    first = run_client(args, 0, args.requests, record)
    again = run_client(args, 0, args.requests)
    for n, (a, b) in enumerate(zip(first, again)):
        if not np.array_equal(a, b):
            fail(f"request {n}: a new connection got different actions for the same request (max diff {np.abs(a - b).max()})")
    if args.requests > 1 and np.array_equal(first[0], first[1]):
        fail("two different requests got the same actions")
    if args.out:
        dump(args.out, args.mapping, record)
    print(json.dumps({"requests": args.requests, "horizon": int(first[0].shape[0]), "metadata": meta}))


def dump(out, mapping, record):
    """The requests as the camera path's oracle reads them: HWC RGB per view, the state, the
    prompt, and the actions the server sent."""
    os.makedirs(out, exist_ok=True)
    keys = {
        "aloha": [("images", "cam_high"), ("images", "cam_left_wrist"), ("images", "cam_right_wrist")],
        "droid": [("observation/exterior_image_1_left",), ("observation/wrist_image_left",), None],
        "libero": [("observation/image",), ("observation/wrist_image",), None],
    }[mapping]
    index = []
    for n, (obs, actions) in enumerate(record):
        entry = {"views": [], "prompt": obs["prompt"]}
        for v, path in enumerate(keys):
            if path is None:
                entry["views"].append(None)
                continue
            img = obs
            for k in path:
                img = img[k]
            if img.shape[0] == 3:
                img = img.transpose(1, 2, 0)
            img = np.ascontiguousarray(img)
            name = f"req{n}_view{v}.rgb"
            img.tofile(os.path.join(out, name))
            entry["views"].append({"file": name, "width": img.shape[1], "height": img.shape[0]})
        if mapping == "droid":
            state = np.concatenate([obs["observation/joint_position"], obs["observation/gripper_position"]])
        elif mapping == "libero":
            state = obs["observation/state"]
        else:
            state = obs["state"]
        entry["state"] = [float(np.float32(x)) for x in state]
        entry["actions_file"] = f"req{n}_actions.f32"
        entry["horizon"], entry["dim"] = int(actions.shape[0]), int(actions.shape[1])
        actions.astype("<f4").tofile(os.path.join(out, entry["actions_file"]))
        index.append(entry)
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f)


def case_many(args):
    alone = [run_client(args, c, args.requests) for c in range(args.clients)]
    results = [None] * args.clients
    errors = []
    barrier = threading.Barrier(args.clients)

    def worker(c):
        try:
            policy = connect(args)
            barrier.wait()
            chunks = []
            for n in range(args.requests):
                chunks.append(check_answer(args, policy.infer(observation(args.mapping, c, n)), n == 0))
            policy._ws.close()
            results[c] = chunks
        except SystemExit:
            errors.append(f"client {c}: check failed")
        except Exception as e:  # noqa: BLE001
            errors.append(f"client {c}: {e!r}")

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail("; ".join(errors))
    worst = 0.0
    for c in range(args.clients):
        for n in range(args.requests):
            d = float(np.abs(results[c][n] - alone[c][n]).max())
            worst = max(worst, d)
            if d > TOL:
                fail(f"client {c} request {n}: concurrent actions differ from alone by {d} (> {TOL})")
    # Clients differ (prompt, images, state): a reply sent to the wrong client would show.
    for c in range(1, args.clients):
        if np.array_equal(alone[c][0], alone[0][0]):
            fail(f"clients 0 and {c} got identical actions for different observations")
    print(json.dumps({"clients": args.clients, "requests": args.requests, "max_diff": worst}))


# ---- bad clients ---------------------------------------------------------------------------


def raw(args, headers=None):
    return websockets.sync.client.connect(
        f"ws://127.0.0.1:{args.port}", compression=None, max_size=None, additional_headers=headers
    )


def expect_error(ws, what, payload=None, fragments=None):
    """Sends (payload or fragments) and expects openpi's error shape: a text message, then the
    close (or, for what the transport refuses, just the close)."""
    try:
        if fragments is not None:
            ws.send(fragments)
        elif payload is not None:
            ws.send(payload)
        msg = ws.recv(timeout=60)
    except websockets.exceptions.ConnectionClosed as e:
        return f"closed ({e.rcvd.code if e.rcvd else 'no close frame'})"
    if not isinstance(msg, str):
        fail(f"{what}: expected an error (text), got a binary answer")
    try:
        ws.recv(timeout=60)
        fail(f"{what}: the connection stayed open after the error")
    except websockets.exceptions.ConnectionClosed as e:
        if e.rcvd is None or e.rcvd.code != 1011:
            fail(f"{what}: closed with {e.rcvd} instead of 1011 after the error")
    return msg


def good_obs_bytes(args, client=7, n=0):
    return msgpack_numpy.packb(observation(args.mapping, client, n))


def case_bad(args):
    """Each bad client, one after the other, while a good client holds its connection open and
    is answered between them exactly as before."""
    reference = run_client(args, 5, 2)
    good = connect(args)

    def good_still_answered():
        a = check_answer(args, good.infer(observation(args.mapping, 5, 0)), good_still_answered.first)
        good_still_answered.first = False
        # n restarts per connection: this connection's request numbers go on growing, so compare
        # with a fresh connection's answer only for the first one.
        return a

    good_still_answered.first = True
    first = good_still_answered()
    if not np.array_equal(first, reference[0]):
        fail("the good client's first answer differs from a fresh connection's")

    seen = {}
    ws = raw(args)
    ws.recv()  # metadata
    seen["malformed"] = expect_error(ws, "malformed msgpack", payload=b"\xc1\xff\x00garbage")
    good_still_answered()

    ws = raw(args)
    ws.recv()
    seen["truncated"] = expect_error(ws, "truncated msgpack", payload=good_obs_bytes(args)[:-10])
    good_still_answered()

    ws = raw(args)
    ws.recv()
    obs = observation(args.mapping, 7, 0)
    obs["unexpected/key"] = np.zeros(3)
    seen["unknown_key"] = expect_error(ws, "unknown key", payload=msgpack_numpy.packb(obs))
    if "unexpected/key" not in seen["unknown_key"]:
        fail(f"the unknown-key error does not name the key: {seen['unknown_key']}")
    good_still_answered()

    for bad in (np.nan, np.inf, -np.inf, 1e39):
        ws = raw(args)
        ws.recv()
        obs = observation(args.mapping, 7, 0)
        key = {"aloha": "state", "droid": "observation/joint_position", "libero": "observation/state"}[args.mapping]
        obs[key] = obs[key].copy()
        obs[key][2] = bad
        seen[f"state_{bad}"] = expect_error(ws, f"state {bad}", payload=msgpack_numpy.packb(obs))
        if "finite" not in seen[f"state_{bad}"] and "range" not in seen[f"state_{bad}"]:
            fail(f"state {bad}: unclear error {seen[f'state_{bad}']}")
        good_still_answered()

    # Wrong shapes: one state value short, an image with four channels, an image that is 2-D.
    key = {"aloha": "state", "droid": "observation/joint_position", "libero": "observation/state"}[args.mapping]
    ws = raw(args)
    ws.recv()
    obs = observation(args.mapping, 7, 0)
    obs[key] = obs[key][:-1].copy()
    seen["short_state"] = expect_error(ws, "short state", payload=msgpack_numpy.packb(obs))
    if "state" not in seen["short_state"] or "values" not in seen["short_state"]:
        fail(f"short state: unclear error {seen['short_state']}")
    good_still_answered()
    for name, bad_image in (("rgba_image", lambda img: np.zeros((10, 12, 4), np.uint8)),
                            ("flat_image", lambda img: np.zeros((10, 12), np.uint8))):
        ws = raw(args)
        ws.recv()
        obs = observation(args.mapping, 7, 0)
        view = {"aloha": ("images", "cam_high"), "droid": (None, "observation/exterior_image_1_left"),
                "libero": (None, "observation/image")}[args.mapping]
        if view[0]:
            obs[view[0]][view[1]] = bad_image(obs[view[0]][view[1]])
        else:
            obs[view[1]] = bad_image(obs[view[1]])
        seen[name] = expect_error(ws, name, payload=msgpack_numpy.packb(obs))
        if "image must be uint8 [H,W,3] or [3,H,W]" not in seen[name]:
            fail(f"{name}: unclear error {seen[name]}")
        good_still_answered()

    # A dtype outside the whitelist, written as msgpack_numpy would write an object array.
    ws = raw(args)
    ws.recv()
    obs = msgpack.unpackb(good_obs_bytes(args), raw=False)
    key = {"aloha": "state", "droid": "observation/joint_position", "libero": "observation/state"}[args.mapping]
    obs[key] = {b"__ndarray__": True, b"data": b"\x80\x04N.", b"dtype": "|O", b"shape": [1]}
    seen["object_dtype"] = expect_error(ws, "object dtype", payload=msgpack.packb(obs, use_bin_type=True))
    if "dtype" not in seen["object_dtype"]:
        fail(f"object dtype: unclear error {seen['object_dtype']}")
    good_still_answered()

    ws = raw(args)
    ws.recv()
    seen["text"] = expect_error(ws, "text frame", payload="hello")
    good_still_answered()

    # Over the size limit in one frame (libsoup refuses the frame) and in many small fragments
    # (the server's byte budget refuses them).
    ws = raw(args)
    ws.recv()
    seen["oversized"] = expect_error(ws, "oversized", payload=b"\x00" * (args.max_message + 1))
    if not seen["oversized"].startswith("closed"):
        fail(f"an oversized message was read whole: {seen['oversized']}")
    good_still_answered()
    # Ten times the limit in 4 KiB fragments: the connection must be cut while they arrive, not
    # after the server has buffered them all.
    ws = raw(args)
    ws.recv()
    chunk = b"\x00" * 4096
    n = args.max_message // len(chunk) * 10
    seen["fragmented"] = expect_error(ws, "fragmented oversized", fragments=(chunk for _ in range(n)))
    if not seen["fragmented"].startswith("closed"):
        fail(f"a message in small fragments was buffered whole: {seen['fragmented']}")
    good_still_answered()

    # A client that sends a request and is killed before the answer; one killed mid-message.
    for mode in ("after-send", "mid-message"):
        p = subprocess.Popen(
            [sys.executable, __file__, "victim", "--port", str(args.port), "--mapping", args.mapping, "--mode", mode],
            stdout=subprocess.PIPE,
        )
        line = p.stdout.readline()
        if line.strip() != b"sent":
            fail(f"the victim ({mode}) did not get to send: {line!r}")
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        good_still_answered()

    # The client's prompt through the pipeline changed nothing for the good client: its chunk for
    # the same observation (request 0 of a new connection) is still the reference.
    again = run_client(args, 5, 1)
    if not np.array_equal(again[0], reference[0]):
        fail("after the bad clients, a fresh connection gets different actions")
    good._ws.close()
    print(json.dumps({k: (v if isinstance(v, str) else str(v))[:200] for k, v in seen.items()}))


def case_victim(args):
    ws = raw(args)
    ws.recv()
    payload = good_obs_bytes(args, client=3)
    if args.mode == "after-send":
        ws.send(payload)
    else:
        # Half a frame, as the websocket library frames it, and then nothing.
        from websockets.frames import Frame, Opcode

        frame = Frame(Opcode.BINARY, payload).serialize(mask=True, extensions=[])
        ws.socket.sendall(frame[: len(frame) // 2])
    print("sent", flush=True)
    time.sleep(3600)


def case_auth(args):
    """With a key set: none or a wrong one is refused before the upgrade, the right one works."""
    for key in (None, "wrong-" + args.api_key, args.api_key + "x"):
        try:
            websocket_client_policy.WebsocketClientPolicy(host="127.0.0.1", port=args.port, api_key=key)
            fail(f"connected with key {key!r}")
        except websockets.exceptions.InvalidStatus as e:
            if e.response.status_code != 401:
                fail(f"key {key!r}: HTTP {e.response.status_code}, expected 401")
    run_client(args, 1, 1)
    # A web page's request (an Origin header) is refused even with the key.
    try:
        raw(args, {"Origin": "http://example.com", "Authorization": f"Api-Key {args.api_key}"})
        fail("a request with an Origin header was upgraded")
    except websockets.exceptions.InvalidStatus as e:
        if e.response.status_code != 403:
            fail(f"Origin: HTTP {e.response.status_code}, expected 403")
    print(json.dumps({"auth": "ok"}))


def case_health(args):
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{args.port}/healthz", timeout=30) as r:
            print(json.dumps({"status": r.status, "body": r.read().decode()}))
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code, "body": e.read().decode()}))


def case_full(args):
    """max-clients clients connected: the next is refused with 503, and gets in once one left."""
    held = [connect(args) for _ in range(args.clients)]
    try:
        connect(args)
        fail("a client beyond max-clients was accepted")
    except websockets.exceptions.InvalidStatus as e:
        if e.response.status_code != 503:
            fail(f"beyond max-clients: HTTP {e.response.status_code}, expected 503")
    held.pop()._ws.close()
    for _ in range(100):
        try:
            run_client(args, 2, 1)
            break
        except websockets.exceptions.InvalidStatus:
            time.sleep(0.05)  # the server has not seen the close yet
    else:
        fail("no room after a client left")
    for h in held:
        h._ws.close()
    print(json.dumps({"full": "ok"}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=["one", "many", "bad", "victim", "auth", "health", "full"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--mapping", default="aloha")
    p.add_argument("--api-key", default=None)
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--max-message", type=int, default=16 << 20)
    p.add_argument("--expect-metadata", default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--mode", default="after-send")
    args = p.parse_args()
    {
        "one": case_one,
        "many": case_many,
        "bad": case_bad,
        "victim": case_victim,
        "auth": case_auth,
        "health": case_health,
        "full": case_full,
    }[args.case](args)


if __name__ == "__main__":
    main()
