"""What handing a step's outputs to the engine's IO thread costs, while the step loop stays busy.

The step loop queues outputs with :meth:`OutputSender.send` and goes on with the next step; when that
step runs Python without blocking (host-bound), the IO thread needs the GIL. For a loop that spins
``--busy-ms`` after each send (under the engine's switch interval), this times the delay from ``send`` to
the socket write and what the loop lost per step against the spin alone, and prints one JSON line.

    python benchmarks/output_handoff.py --busy-ms 1 --sends 1000
"""

from __future__ import annotations

import argparse
import json
import time

import zmq

from infercore.engine.core_proc import tune_interpreter
from infercore.engine.output_sender import OutputSender
from infercore.wire.messages import EngineCoreOutput, EngineCoreOutputs, SchedulerStats


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
    tune_interpreter()
    sender = OutputSender(push)
    delays = []
    lost = 0.0
    for i in range(args.sends):
        queued = time.perf_counter()
        sender.send(EngineCoreOutputs(outputs=[EngineCoreOutput(f"r{i}", [i])], stats=SchedulerStats()))
        _spin(args.busy_ms)
        lost += time.perf_counter() - queued - args.busy_ms / 1e3
        # The loop is idle again: the message is on the socket by now; how long after send did it go?
        pull.recv_multipart()
        delays.append(sender.last_write_at - queued)
    sender.close()
    delays.sort()
    print(json.dumps({"benchmark": "output_handoff", "busy_ms": args.busy_ms, "sends": args.sends,
                      "delay_p50_ms": round(delays[len(delays) // 2] * 1e3, 3),
                      "delay_p90_ms": round(delays[int(len(delays) * 0.9)] * 1e3, 3),
                      "loop_lost_us_per_step": round(lost / args.sends * 1e6, 1)}))


if __name__ == "__main__":
    main()
