#!/usr/bin/env python3
"""A delaying proxy on 127.0.0.1 for bench/robot-link.sh: every datagram (UDP) or every piece of
the byte stream (TCP) waits DELAY +- JITTER ms, uniformly and independently, in each direction
before it is passed on. UDP datagrams may overtake each other (as with tc netem's jitter); a TCP
stream keeps its order (a piece never leaves before the one before it). Where tc netem is
available a veth pair in a network namespace does the same in the kernel; this is for machines
without it. Standard library only; seeded, so two runs delay alike.

  delay_proxy.py --proto udp|tcp --listen PORT --to PORT --delay MS --jitter MS [--seed S]
"""
import argparse
import asyncio
import random
import socket


def delay_of(rng, a):
    return max(0.0, (a.delay + rng.uniform(-a.jitter, a.jitter)) / 1000.0)


async def udp(a, rng):
    loop = asyncio.get_running_loop()
    client = {"addr": None}
    last = {"up": 0.0, "down": 0.0}  # when the previous datagram each way leaves

    def leave_at(way):
        # Strictly later than the one before: asyncio's timers do not keep the order of equal
        # deadlines.
        last[way] = max(last[way] + 1e-6, loop.time() + delay_of(rng, a))
        return last[way]

    class ToRobot(asyncio.DatagramProtocol):
        def connection_made(self, t):
            self.t = t

        def datagram_received(self, data, addr):  # from the robot: back to the sender
            if client["addr"]:
                loop.call_at(leave_at("down"), front.transport.sendto, data, client["addr"])

    class Front(asyncio.DatagramProtocol):
        def connection_made(self, t):
            self.transport = t

        def datagram_received(self, data, addr):  # from the sender: on to the robot
            client["addr"] = addr
            loop.call_at(leave_at("up"), back.t.sendto, data)

    front = Front()
    await loop.create_datagram_endpoint(lambda: front, local_addr=("127.0.0.1", a.listen))
    _, back = await loop.create_datagram_endpoint(ToRobot, remote_addr=("127.0.0.1", a.to))
    await asyncio.Event().wait()


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
            r2, w2 = await asyncio.open_connection("127.0.0.1", a.to)
        except OSError:
            w1.close()
            return
        w2.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pipe(r1, w2, rng, a), pipe(r2, w1, rng, a), return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", a.listen)
    async with server:
        await server.serve_forever()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--proto", choices=["udp", "tcp"], required=True)
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--to", type=int, required=True)
    p.add_argument("--delay", type=float, default=60.0)
    p.add_argument("--jitter", type=float, default=15.0)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = random.Random(a.seed)
    asyncio.run(udp(a, rng) if a.proto == "udp" else tcp(a, rng))


if __name__ == "__main__":
    main()
