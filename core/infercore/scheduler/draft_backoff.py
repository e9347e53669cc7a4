"""Draft back-off: a request whose drafts keep failing stops paying for them for a while.

A verifying step costs more than a plain one: the target computes ``k`` more positions, a model-based
proposer runs its own passes, and under async scheduling a step that may draft cannot overlap with the
next. It pays only through accepted drafts. So each request keeps the number of drafts accepted over its
last :data:`WINDOW` verifying steps; when their mean falls below
``SpeculativeConfig.disable_by_acceptance``, the request *pauses*: its next ``pause`` scheduled steps
verify no drafts. Then it drafts again for a shorter window, a probe of :data:`PROBE_WINDOW` steps. Each
pause that follows a failing probe is twice the last one (from :data:`FIRST_PAUSE` to :data:`MAX_PAUSE`
steps); a passing window starts over: full windows, the first pause. Drafts never change what is sampled,
so the back-off changes only the speed.
"""

from __future__ import annotations

#: Verifying steps over which a request's accepted drafts are averaged.
WINDOW = 8
#: The window after a pause: a probe of whether the drafts land again (4 steps with nothing accepted at 0.7
#: acceptance: 0.3⁴, under 1%).
PROBE_WINDOW = 4
#: Steps of the first pause; each failing window after a pause doubles it.
FIRST_PAUSE = 16
#: The longest pause, in steps.
MAX_PAUSE = 512


class DraftBackoff:
    """One request's window of verifying steps and its pause (``Request.draft_backoff``)."""

    __slots__ = ("steps", "accepted", "window", "pause_left", "next_pause")

    def __init__(self) -> None:
        self.steps = 0
        self.accepted = 0
        #: Verifying steps in the current window.
        self.window = WINDOW
        #: Scheduled steps left in which the request verifies no drafts.
        self.pause_left = 0
        self.next_pause = FIRST_PAUSE

    def record(self, num_accepted: int, threshold: float) -> None:
        """One verifying step accepted ``num_accepted`` drafts; a full window below ``threshold`` accepted
        drafts per step starts a pause."""
        self.steps += 1
        self.accepted += num_accepted
        if self.steps < self.window:
            return
        if self.accepted < threshold * self.steps:
            self.pause_left = self.next_pause
            self.next_pause = min(2 * self.next_pause, MAX_PAUSE)
            self.window = PROBE_WINDOW
        else:
            self.next_pause = FIRST_PAUSE
            self.window = WINDOW
        self.steps = self.accepted = 0

    @property
    def paused(self) -> bool:
        """Whether the request's next scheduled step verifies no drafts."""
        return self.pause_left > 0

    def tick(self) -> None:
        """The request was scheduled a step while paused."""
        self.pause_left -= 1
