"""How long the engine's output IO thread waits to send a step's outputs while the step loop stays busy.

The step loop queues outputs with :meth:`OutputSender.send` and goes on with the next step; when that
step runs Python without blocking (host-bound), the IO thread needs the GIL. This times the delay from
``send`` to the socket write for a loop that spins ``--busy-ms`` after each send, and prints one JSON line.

    python benchmarks/output_handoff.py --busy-ms 8 --sends 50
"""

from __future__ import annotations

import argparse
import json
import time

import zmq

from infercore.engine.messages import EngineCoreOutput, EngineCoreOutputs
from infercore.engine.output_sender import OutputSender


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--busy-ms", type=float, default=8.0)
    parser.add_argument("--sends", type=int, default=50)
    args = parser.parse_args()
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"tcp://127.0.0.1:{port}")
    sender = OutputSender(push)
    delays = []
    for i in range(args.sends):
        queued = time.perf_counter()
        sender.send(EngineCoreOutputs(outputs=[EngineCoreOutput(f"r{i}", [i])]))
        _spin(args.busy_ms)
        # The loop is idle again: the message is on the socket by now; how long after send did it go?
        pull.recv_multipart()
        delays.append(sender.last_write_at - queued)
    sender.close()
    delays.sort()
    print(json.dumps({"benchmark": "output_handoff", "busy_ms": args.busy_ms, "sends": args.sends,
                      "delay_p50_ms": round(delays[len(delays) // 2] * 1e3, 3),
                      "delay_p90_ms": round(delays[int(len(delays) * 0.9)] * 1e3, 3)}))


if __name__ == "__main__":
    main()
