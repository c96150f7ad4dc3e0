# SPDX-License-Identifier: Apache-2.0
"""Hostile clients beside normal ones against a running `multihead serve`, for a while.

    /usr/bin/python3 scripts/soak_serve.py PORT PID MINUTES

First a quiet phase (a fifth of the time, at most a minute): NORMAL clients alone, posting a valid
request after another on keep-alive connections, each answer checked; their latency is the
baseline. Then the same normal clients beside hostile ones, all the time: IDLE connections that
send nothing (reconnecting when the server closes them), DRIPPERS sending a request header a byte
a second, a slot HOG holding as many one-byte connections as the server lets it and reconnecting
at once whenever one is closed, chunked bodies past the body limit, pipelined requests, clients
that half-close after their request, malformed request lines, clients that reset mid-request,
and requests that try to smuggle another behind an ambiguous framing (Transfer-Encoding other
than chunked alone, Transfer-Encoding beside Content-Length, two Content-Lengths). Each kind of
client speaks from its own loopback address (127.0.0.1 the normal ones), as separate machines
would. Prints one report and exits 1 if any normal request went unanswered or was answered
wrongly, if a smuggled request was answered, or if the normal clients' p99 latency beside the
hostile ones is more than 10 times the quiet phase's.
"""

import asyncio
import json
import multiprocessing
import resource
import socket
import statistics
import struct
import sys
import time

IDLE, DRIPPERS, NORMAL, HOG = 1500, 150, 4, 2200
# After the server closes one of its connections, a hostile client waits this long before its next
# (a connection's place taken by its own next one, at once, would be a connect flood: a test of the
# machine's CPU, not of the server's policy).
RECONNECT_PAUSE_S = 0.25
HOST = "127.0.0.1"
# The address each kind of client connects from (all of 127/8 is loopback on Linux).
FROM = {"normal": "127.0.0.1", "idle": "127.0.0.2", "dripper": "127.0.0.3", "hog": "127.0.0.4",
        "one-shot": "127.0.0.5"}
P99_FACTOR = 10


def connect(kind):
    return asyncio.open_connection(HOST, PORT, local_addr=(FROM[kind], 0))


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
        self.smuggled = []

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
                reader, writer = await connect("normal")
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
            reader, writer = await connect("idle")
            got = await reader.read(1)  # until the server closes it (its idle timeout)
            counts.hit("idle", "closed by the server" if got == b"" else "answered")
            writer.close()
        except OSError as e:
            counts.hit("idle", type(e).__name__)
        await asyncio.sleep(RECONNECT_PAUSE_S)


async def dripper(until, counts):
    head = b"POST /v1/predict HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"z" * 200
    while time.monotonic() < until:
        try:
            reader, writer = await connect("dripper")
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


async def hog(until, counts):
    """One of the hog's connections: a byte, then held until the server closes it; again at once."""
    while time.monotonic() < until:
        try:
            reader, writer = await connect("hog")
            writer.write(b"P")
            await writer.drain()
            start = time.monotonic()
            got = await reader.read(1)
            held = time.monotonic() - start
            counts.hit("slot hog", "answered" if got else "closed at once" if held < 0.05 else "closed later")
            writer.close()
        except OSError as e:
            counts.hit("slot hog", type(e).__name__)
        await asyncio.sleep(RECONNECT_PAUSE_S)


async def smuggle(kind, payload, want, counts):
    """A request with an ambiguous framing and another hidden behind it: one answer, `want`, then close."""
    try:
        reader, writer = await connect("one-shot")
        writer.write(payload)
        await writer.drain()
        got = await asyncio.wait_for(reader.read(), 30)  # to the server's close
        writer.close()
        status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.1 ") else 0
        counts.hit(kind, status)
        if status != want or got.count(b"HTTP/1.1 ") != 1 or b'"task"' in got:
            counts.smuggled.append(f"{kind}: {got[:300]!r}")
    except (OSError, asyncio.TimeoutError, ValueError, IndexError) as e:
        counts.hit(kind, type(e).__name__)


async def one_shot(kind, payload, counts, half_close=False, reset=False):
    try:
        reader, writer = await connect("one-shot")
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
        reader, writer = await connect("one-shot")
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
    hidden = b"GET /v1/model HTTP/1.1\r\nHost: x\r\n\r\n"
    chunked = b"%x\r\n" % len(hidden) + hidden + b"\r\n0\r\n\r\n"
    head = b"POST /v1/predict HTTP/1.1\r\nHost: x\r\n"
    while time.monotonic() < until:
        await asyncio.gather(
            smuggle("smuggle TE chunked, identity", head + b"Transfer-Encoding: chunked, identity\r\n\r\n" + hidden,
                    501, counts),
            smuggle("smuggle TE gzip, chunked", head + b"Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked, 501,
                    counts),
            smuggle("smuggle TE and CL", head + b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n" + chunked,
                    400, counts),
            smuggle("smuggle CL twice", head + b"Content-Length: 2\r\nContent-Length: 40\r\n\r\n{}" + hidden, 400,
                    counts),
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


def latency_line(name, latencies):
    lat = sorted(latencies) or [float("nan")]
    p99 = lat[int(0.99 * (len(lat) - 1))]
    print(f"normal latency, {name}: {len(latencies)} requests, median {statistics.median(lat) * 1000:.1f} ms, "
          f"p99 {p99 * 1000:.1f} ms, max {lat[-1] * 1000:.1f} ms")
    return p99


async def hostile(until):
    counts = Counts()
    tasks = [idle_client(until, counts) for _ in range(IDLE)]
    tasks += [dripper(until, counts) for _ in range(DRIPPERS)]
    tasks += [hog(until, counts) for _ in range(HOG)]
    tasks.append(hostile_rounds(until, counts))
    await asyncio.gather(*tasks)
    return counts


def hostile_process(until, results):
    """The hostile clients, in a process of their own: their work does not delay the normal clients'."""
    counts = asyncio.run(hostile(until))
    results.send((counts.hostile, counts.smuggled))


async def main(pid, minutes):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 16384), hard))
    quiet_s = min(60.0, minutes * 60 / 5)
    counts = Counts()
    rss_start = rss_mib(pid)
    # The quiet phase: normal clients alone.
    await asyncio.gather(*[normal_client(n, time.monotonic() + quiet_s, counts) for n in range(NORMAL)])
    quiet = counts.latencies
    counts.latencies = []
    until = time.monotonic() + minutes * 60 - quiet_s
    receive, send = multiprocessing.Pipe(duplex=False)
    others = multiprocessing.Process(target=hostile_process, args=(until, send))
    others.start()
    await asyncio.sleep(5)  # the hostile clients in place before the normal ones are measured beside them
    await asyncio.gather(*[normal_client(n, until, counts) for n in range(NORMAL)])
    counts.hostile, counts.smuggled = receive.recv()
    others.join()
    print(f"soak-serve: {minutes} min ({quiet_s:.0f} s quiet first); {IDLE} idle connections, {DRIPPERS} drippers, "
          f"a slot hog of {HOG} connections, {NORMAL} normal clients")
    print(f"normal requests: {counts.normal_sent} sent, {counts.normal_ok} answered correctly, "
          f"{len(counts.normal_lost)} lost")
    quiet_p99 = latency_line("quiet", quiet)
    hostile_p99 = latency_line("beside the hostile clients", counts.latencies)
    ratio = hostile_p99 / quiet_p99
    print(f"normal p99 beside the hostile clients: {ratio:.1f} times the quiet one (at most {P99_FACTOR})")
    for kind, outcomes in sorted(counts.hostile.items()):
        print(f"hostile {kind}: " + ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items(), key=str)))
    print(f"server RSS: {rss_start:.1f} MiB at the start, {rss_mib(pid):.1f} MiB at the end")
    for lost in counts.normal_lost[:5]:
        print(f"lost: {lost}")
    for smuggled in counts.smuggled[:5]:
        print(f"smuggling not refused as it should be: {smuggled}")
    ok = not counts.normal_lost and counts.normal_ok > 0 and not counts.smuggled and ratio <= P99_FACTOR
    return 0 if ok else 1


if __name__ == "__main__":
    PORT = int(sys.argv[1])
    sys.exit(asyncio.run(main(int(sys.argv[2]), float(sys.argv[3]))))
