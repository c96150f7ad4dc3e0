"""Hostile clients beside normal ones against a running `multihead serve`, for a while.

    /usr/bin/python3 scripts/soak_serve.py PORT PID MINUTES

Hostile, all the time: IDLE connections that send nothing (reconnecting when the server closes
them), DRIPPERS sending a request header a byte a second, chunked bodies past the body limit,
pipelined requests, clients that half-close after their request, malformed request lines, and
clients that reset mid-request. Normal: NORMAL clients posting a valid request after another on
keep-alive connections, each answer checked. Prints one report and exits 1 if any normal request
went unanswered or was answered wrongly. Only loopback is spoken to.
"""

import asyncio
import json
import resource
import socket
import statistics
import struct
import sys
import time

IDLE, DRIPPERS, NORMAL = 2000, 200, 4
HOST = "127.0.0.1"


def request(body, extra=""):
    data = json.dumps(body).encode()
    return (f"POST /v1/predict HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(data)}\r\n\r\n").encode() + data


async def read_response(reader):
    """One HTTP response: (status, body bytes)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    return status, await reader.readexactly(length)


class Counts:
    def __init__(self):
        self.normal_sent = self.normal_ok = 0
        self.normal_lost = []
        self.latencies = []
        self.hostile = {}

    def hit(self, kind, what):
        self.hostile.setdefault(kind, {}).setdefault(what, 0)
        self.hostile[kind][what] += 1


async def normal_client(n, until, counts):
    texts = ["good great fine", "bad awful poor", "nice day", "poor good"]
    reader = writer = None
    i = 0
    while time.monotonic() < until:
        text = texts[(n + i) % len(texts)]
        i += 1
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection(HOST, PORT)
            start = time.monotonic()
            counts.normal_sent += 1
            writer.write(request({"inputs": [text]}))
            await writer.drain()
            status, body = await asyncio.wait_for(read_response(reader), 30)
            took = time.monotonic() - start
            answer = json.loads(body)
            if status == 200 and answer["outputs"][0]["input"] == text:
                counts.normal_ok += 1
                counts.latencies.append(took)
            else:
                counts.normal_lost.append(f"{status} {body[:200]!r}")
        except Exception as e:  # noqa: BLE001 - any failure of a normal request is what is counted
            counts.normal_lost.append(f"{type(e).__name__}: {e}")
            if writer is not None:
                writer.close()
            writer = None


async def idle_client(until, counts):
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(HOST, PORT)
            got = await reader.read(1)  # until the server closes it (its idle timeout)
            counts.hit("idle", "closed by the server" if got == b"" else "answered")
            writer.close()
        except OSError as e:
            counts.hit("idle", type(e).__name__)
            await asyncio.sleep(1)


async def dripper(until, counts):
    head = b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"z" * 200
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(HOST, PORT)
            for k in range(len(head)):
                writer.write(head[k:k + 1])
                await writer.drain()
                await asyncio.sleep(1)
                if reader.at_eof() or writer.is_closing():
                    break
            counts.hit("dripper", "dropped at its deadline")
            writer.close()
        except OSError as e:
            counts.hit("dripper", type(e).__name__)
            await asyncio.sleep(1)


async def one_shot(kind, payload, counts, half_close=False, reset=False):
    try:
        reader, writer = await asyncio.open_connection(HOST, PORT)
        writer.write(payload)
        await writer.drain()
        if reset:
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            counts.hit(kind, "reset")
            return
        if half_close:
            writer.write_eof()
        status, _ = await asyncio.wait_for(read_response(reader), 30)
        counts.hit(kind, status)
        writer.close()
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError) as e:
        counts.hit(kind, type(e).__name__)


async def chunked_too_large(counts):
    try:
        reader, writer = await asyncio.open_connection(HOST, PORT)
        writer.write(b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
        for _ in range(64):  # 4 MB offered, past the 1 MB limit
            writer.write(chunk)
            await writer.drain()
        status, _ = await asyncio.wait_for(read_response(reader), 30)
        counts.hit("chunked 4 MB", status)
        writer.close()
    except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
        counts.hit("chunked 4 MB", type(e).__name__)


async def hostile_rounds(until, counts):
    good = request({"inputs": ["good"]})
    while time.monotonic() < until:
        await asyncio.gather(
            chunked_too_large(counts),
            one_shot("pipelined x3", good + good + request({"inputs": ["bad"]}, "Connection: close\r\n"), counts),
            one_shot("half-closed", good, counts, half_close=True),
            one_shot("malformed line", b"GARBAGE / NOT-HTTP\r\n\r\n", counts),
            one_shot("negative length", b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", counts),
            one_shot("reset mid-body", good[:-5], counts, reset=True),
        )
        await asyncio.sleep(0.2)


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def main(pid, minutes):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    until = time.monotonic() + minutes * 60
    counts = Counts()
    rss_start = rss_mib(pid)
    tasks = [idle_client(until, counts) for _ in range(IDLE)]
    tasks += [dripper(until, counts) for _ in range(DRIPPERS)]
    tasks += [normal_client(n, until, counts) for n in range(NORMAL)]
    tasks.append(hostile_rounds(until, counts))
    await asyncio.gather(*tasks)
    lat = sorted(counts.latencies) or [float("nan")]
    print(f"soak-serve: {minutes} min; {IDLE} idle connections, {DRIPPERS} drippers, {NORMAL} normal clients")
    print(f"normal requests: {counts.normal_sent} sent, {counts.normal_ok} answered correctly, "
          f"{len(counts.normal_lost)} lost")
    print(f"normal latency: median {statistics.median(lat) * 1000:.1f} ms, "
          f"p99 {lat[int(0.99 * (len(lat) - 1))] * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms")
    for kind, outcomes in sorted(counts.hostile.items()):
        print(f"hostile {kind}: " + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items(), key=str)))
    print(f"server RSS: {rss_start:.1f} MiB at the start, {rss_mib(pid):.1f} MiB at the end")
    for lost in counts.normal_lost[:5]:
        print(f"lost: {lost}")
    return 0 if not counts.normal_lost and counts.normal_ok > 0 else 1


if __name__ == "__main__":
    PORT = int(sys.argv[1])
    sys.exit(asyncio.run(main(int(sys.argv[2]), float(sys.argv[3]))))
