"""Stop strings: found across token boundaries, and never partly streamed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StopMatch:
    """A stop string found in the text: which one, and where the text ends after it."""

    stop: str
    text_end: int


class StopChecker:
    """Finds the user's stop strings in a growing text and says how much of the text is safe to show.

    Text that ends in a prefix of some stop string is held back until the next characters decide
    whether the stop string follows; with ``include_stop_str_in_output`` nothing is held back, since the
    stop string is shown either way.
    """

    def __init__(self, stops: list[str], include_in_output: bool = False) -> None:
        self.stops = list(stops)
        self.include_in_output = include_in_output
        self._longest = max((len(s) for s in self.stops), default=0)

    def find(self, text: str, new_from: int) -> StopMatch | None:
        """The earliest stop string in ``text`` that ends after ``new_from`` (where the new text starts)."""
        start = max(0, new_from - self._longest + 1)
        best: tuple[int, str] | None = None
        for stop in self.stops:
            at = text.find(stop, start)
            if at >= 0 and (best is None or at < best[0]):
                best = (at, stop)
        if best is None:
            return None
        at, stop = best
        return StopMatch(stop, at + len(stop) if self.include_in_output else at)

    def holdback(self, text: str) -> int:
        """How many characters at the end of ``text`` could begin a stop string."""
        if self.include_in_output or not text:
            return 0
        last = text[-1]
        longest = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(text)), longest, -1):
                if stop[k - 1] == last and text.endswith(stop[:k]):
                    longest = k
                    break
        return longest
