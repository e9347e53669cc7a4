"""Admission: how many sequences a server takes before it answers "full, retry later".

The engines hold ``max_num_seqs`` running sequences each and, past those, ``--max-num-queued-requests``
waiting ones; a request of ``n`` sequences counts ``n`` times. A new sequence fills a free running slot
first, so a request is refused only when what is held already plus what it brings would pass running
slots plus waiting slots.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AdmissionLimit:
    """The sequences the engines behind one server may hold at once."""

    #: Running slots of all the engines (``max_num_seqs`` times the data-parallel size).
    running_slots: int
    #: Sequences that may wait past the running ones (``--max-num-queued-requests``).
    waiting_slots: int

    @property
    def capacity(self) -> int:
        return self.running_slots + self.waiting_slots

    def refusal(self, *, engine_running: int, engine_waiting: int, sent_since_stats: int, own_in_flight: int,
                num_new: int) -> str | None:
        """Why ``num_new`` more sequences can't be taken now, or None when they can.

        ``engine_running`` / ``engine_waiting`` are the engines' last reported counts (every API server's
        sequences), ``sent_since_stats`` what this process sent after that report, ``own_in_flight`` what
        this process holds in all (a floor while reports lag behind).
        """
        held = max(own_in_flight, engine_running + engine_waiting + sent_since_stats)
        if held + num_new <= self.capacity:
            return None
        return (f"the server is full: it holds {held} sequences and takes at most {self.running_slots} running "
                f"plus {self.waiting_slots} waiting (a request of n counts n times), so {num_new} more must wait; "
                "retry later")
