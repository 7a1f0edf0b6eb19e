"""Settings the policy file may leave to the environment.

Some settings are needed only because of another one (the model's URL when
the backend is openai, the store's URL when it is redis) and may come from
the pod's environment instead of the file (the store's URL with its password
only from there). The daemon refuses to start without them; `check-policy`,
which reads the file alone as a policy repository's CI does, lists them.
Both say it from the same `Need`, so the rule and its words exist once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._yaml import at_line

__all__ = ["Need"]


@dataclass(frozen=True, slots=True)
class Need:
    """`field` is required because `because` is `value`; `variable` may give it."""

    field: str
    variable: str
    because: str
    value: str

    def error(self, lines: Mapping[str, int]) -> str:
        """What stops the daemon; `lines`: the file's line of each field it sets."""
        because = at_line(self.because, lines.get(self.because))
        return (
            f"{self.field}: required when {because} is {self.value} "
            f"(set it in the file or in {self.variable})"
        )

    def note(self) -> str:
        """What check-policy says of a file that leaves the field to the environment."""
        return f"at start, {self.field} must come from {self.variable} (the file does not set it)"
