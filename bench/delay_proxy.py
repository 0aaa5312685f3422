#!/usr/bin/env python3
"""A delaying, lossy proxy on 127.0.0.1 for bench/robot-link.sh and `pi0-sim robot` (docs/sim.md):
every datagram (UDP) or every piece of the byte stream (TCP) waits DELAY +- JITTER ms, uniformly
and independently, in each direction before it is passed on. UDP datagrams may overtake each
other (as with tc netem's jitter); a TCP stream keeps its order (a piece never leaves before the
one before it). UDP only: --loss drops that share of the datagrams each way. Where tc netem is
available a veth pair in a network namespace does the same in the kernel; this is for machines
without it. Standard library only; seeded, so two runs delay alike, and each way of each relay
drops the same datagrams by their order (its own generator: the other ways' traffic does not
shift it).

  delay_proxy.py --proto udp|tcp --listen PORT --to PORT --delay MS --jitter MS [--seed S]
  delay_proxy.py --proto udp --listen P1 --to Q1 [--listen P2 --to Q2 ...] --loss 0.03 ...

UDP relays one port to another per --listen/--to pair (given in pairs, in order): what a client
sends to 127.0.0.1:P goes on to 127.0.0.1:Q ("up"), and what Q answers goes back to the client
last heard ("down"). With --loss (0 included) it prints, on SIGTERM or SIGINT, one JSON line of
what each relay forwarded and dropped each way, and their sums:
  {"relays": [{"listen": P, "to": Q, "up": {"forwarded": N, "dropped": N}, "down": {...}}, ...],
   "up": {...}, "down": {...}}
"""
import argparse
import asyncio
import json
import random
import signal
import socket


def delay_of(rng, a):
    return max(0.0, (a.delay + rng.uniform(-a.jitter, a.jitter)) / 1000.0)


def way_counts():
    return {"forwarded": 0, "dropped": 0}


async def udp(a, rng, counts):
    loop = asyncio.get_running_loop()
    last = {"up": 0.0, "down": 0.0}  # when the previous datagram each way leaves (all relays)

    def leave_at(way):
        # Strictly later than the one before: asyncio's timers do not keep the order of equal
        # deadlines.
        last[way] = max(last[way] + 1e-6, loop.time() + delay_of(rng, a))
        return last[way]

    async def relay(index, listen, to):
        client = {"addr": None}
        count = counts[index]
        # One generator per way of each relay, apart from the delays': the k-th datagram one way
        # is lost or not whatever else went through, and the delays are those of a run without
        # --loss.
        lose = {way: random.Random(f"{a.seed}:{index}:{way}") for way in ("up", "down")}

        def send(way, sendto, *args):
            if a.loss > 0 and lose[way].random() < a.loss:
                count[way]["dropped"] += 1
                return
            count[way]["forwarded"] += 1
            loop.call_at(leave_at(way), sendto, *args)

        class ToTarget(asyncio.DatagramProtocol):
            def connection_made(self, t):
                self.t = t

            def datagram_received(self, data, addr):  # from the target: back to the client
                if client["addr"]:
                    send("down", front.transport.sendto, data, client["addr"])

        class Front(asyncio.DatagramProtocol):
            def connection_made(self, t):
                self.transport = t

            def datagram_received(self, data, addr):  # from the client: on to the target
                client["addr"] = addr
                send("up", back.t.sendto, data)

        front = Front()
        await loop.create_datagram_endpoint(lambda: front, local_addr=("127.0.0.1", listen))
        _, back = await loop.create_datagram_endpoint(ToTarget, remote_addr=("127.0.0.1", to))

    for i, (listen, to) in enumerate(zip(a.listen, a.to)):
        await relay(i, listen, to)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def report(a, counts):
    relays = [{"listen": listen, "to": to, **c} for listen, to, c in zip(a.listen, a.to, counts)]
    total = {way: {k: sum(c[way][k] for c in counts) for k in ("forwarded", "dropped")}
             for way in ("up", "down")}
    print(json.dumps({"relays": relays, **total}), flush=True)


async def pipe(reader, writer, rng, a):
    loop = asyncio.get_running_loop()
    last = 0.0  # when the previous piece leaves: order is kept
    queue = asyncio.Queue()

    async def sender():
        while True:
            at, data = await queue.get()
            if data is None:
                writer.close()
                return
            wait = at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    task = asyncio.create_task(sender())
    while True:
        data = await reader.read(65536)
        last = max(last, loop.time() + delay_of(rng, a))
        queue.put_nowait((last, data if data else None))
        if not data:
            break
    await task


async def tcp(a, rng):
    async def handle(r1, w1):
        w1.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            r2, w2 = await asyncio.open_connection("127.0.0.1", a.to[0])
        except OSError:
            w1.close()
            return
        w2.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pipe(r1, w2, rng, a), pipe(r2, w1, rng, a), return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", a.listen[0])
    async with server:
        await server.serve_forever()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument("--proto", choices=["udp", "tcp"], required=True)
    p.add_argument("--listen", type=int, action="append", required=True)
    p.add_argument("--to", type=int, action="append", required=True)
    p.add_argument("--delay", type=float, default=60.0)
    p.add_argument("--jitter", type=float, default=15.0)
    p.add_argument("--loss", type=float, default=None,
                   help="udp: the share of datagrams dropped each way, 0 to 1; prints the counts")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if len(a.listen) != len(a.to):
        p.error("--listen and --to come in pairs")
    if a.proto == "tcp" and (len(a.listen) > 1 or a.loss is not None):
        p.error("tcp relays one port, without loss")
    if a.loss is not None and not 0 <= a.loss <= 1:
        p.error(f"--loss: a share from 0 to 1: {a.loss}")
    rng = random.Random(a.seed)
    if a.proto == "tcp":
        asyncio.run(tcp(a, rng))
        return
    counts = [{"up": way_counts(), "down": way_counts()} for _ in a.listen]
    lossy = a.loss is not None
    a.loss = a.loss or 0.0
    asyncio.run(udp(a, rng, counts))
    if lossy:
        report(a, counts)


if __name__ == "__main__":
    main()
