#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Policy server benchmark: N robots (openpi-client's WebsocketClientPolicy, each in its own
process) against one pi0-serve, batching off and on; prints a table.

  python3 bench/serve_bench.py                       # pi0-tiny on the CPU, 1 2 4 8 clients
  python3 bench/serve_bench.py --model builtin:pi0 --device cuda --image-size 224  # a GPU

Each client sends ALOHA-style observations (three 224x224 CHW images, a 14-value state, a
prompt) as fast as it gets answers, for --duration seconds after a warm-up. Reported per row:
requests/s of all clients together, each client's latency p50/p99 (client-side, request sent to
answer received; the worst client's), and the speed-up: N-client throughput / 1-client
throughput of the same mode. Never asserted anywhere: numbers go to docs/perf.md.
"""

import argparse
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import numpy as np


def client_main(port, index, duration, start_at, out_q):
    from openpi_client import websocket_client_policy

    rng = np.random.RandomState(index)
    obs = {
        "images": {k: rng.randint(0, 256, size=(3, 224, 224), dtype=np.uint8)
                   for k in ("cam_high", "cam_left_wrist", "cam_right_wrist")},
        "state": rng.uniform(-1, 1, size=14),
        "prompt": f"robot {index}: fold the towel",
    }
    policy = websocket_client_policy.WebsocketClientPolicy(host="127.0.0.1", port=port)
    for _ in range(2):
        policy.infer(obs)
    while time.time() < start_at:
        time.sleep(0.001)
    lat = []
    end = start_at + duration
    while time.time() < end:
        t0 = time.perf_counter()
        policy.infer(obs)
        lat.append(time.perf_counter() - t0)
    policy._ws.close()
    out_q.put((index, lat))


def start_server(args, batching):
    cmd = [args.serve, "--model", args.model, "--mapping", "aloha", "--port", "0",
           "--max-clients", "64"]
    if args.device:
        cmd += ["--device", args.device]
    if args.image_size:
        cmd += ["--image-size", str(args.image_size)]
    if batching:
        cmd += ["--batch-size", str(args.batch_size), "--max-wait-ms", str(args.max_wait_ms)]
    elif args.batching_option:
        cmd += ["--batch-size", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + args.start_timeout
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if "serving" in line:
            port = int(line.split("ws://")[1].split()[0].rsplit(":", 1)[1])
            return proc, port
    proc.kill()
    sys.exit("pi0-serve did not start:\n" + proc.stderr.read())


def run_clients(port, n, duration):
    q = mp.Queue()
    start_at = time.time() + 3.0 + 0.2 * n  # every client connected and warmed up by then
    procs = [mp.Process(target=client_main, args=(port, i, duration, start_at, q)) for i in range(n)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    total = sum(len(lat) for _, lat in results)
    p50 = max(np.percentile(lat, 50) for _, lat in results) * 1e3
    p99 = max(np.percentile(lat, 99) for _, lat in results) * 1e3
    return total / duration, p50, p99


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser()
    p.add_argument("--serve", default=os.path.join(root, "build/tools/pi0-serve"))
    p.add_argument("--model", default="builtin:pi0-tiny")
    p.add_argument("--device", default="")
    p.add_argument("--image-size", type=int, default=0)
    p.add_argument("--clients", default="1,2,4,8")
    p.add_argument("--duration", type=float, default=10.0)
    p.add_argument("--modes", default="off,on", help="batching modes to run: off, on or both")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-wait-ms", type=float, default=5.0)
    p.add_argument("--start-timeout", type=float, default=600.0)
    args = p.parse_args()
    help_text = subprocess.run([args.serve, "--help-all"], capture_output=True, text=True).stdout
    args.batching_option = "--batch-size" in help_text
    modes = [m for m in args.modes.split(",") if m]
    if "on" in modes and not args.batching_option:
        print("# this pi0-serve has no --batch-size (batching not built yet): batching off only")
        modes = [m for m in modes if m != "on"]

    counts = [int(c) for c in args.clients.split(",")]
    print(f"# {args.model} device={args.device or 'auto'} duration={args.duration}s "
          f"batch-size={args.batch_size} max-wait={args.max_wait_ms}ms")
    print(f"{'batching':>8} {'clients':>7} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'speed-up':>8}")
    for mode in modes:
        proc, port = start_server(args, mode == "on")
        try:
            base = None
            for n in counts:
                rps, p50, p99 = run_clients(port, n, args.duration)
                base = base or (rps if n == 1 else None)
                ratio = f"{rps / base:.2f}x" if base else "-"
                print(f"{mode:>8} {n:>7} {rps:>8.1f} {p50:>8.1f} {p99:>8.1f} {ratio:>8}", flush=True)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
