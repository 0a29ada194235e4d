"""``make-data.log``: the images left out of their batch and the files and links
that are not read as images, one tab-separated line each.

Rewritten whole after every batch (through :func:`convnet.outputs.write_output`),
so it is always true of the batches in the target, even when a run is stopped; a
resumed run keeps the lines of the batches it keeps.
"""

from __future__ import annotations

from convnet.make_data.writer import batch_name
from convnet.outputs import write_output


class SkipLog:
    """The log file: a line per skipped image (its batch, its name, why) and per
    ignored file or link (``ignored``, its path, why)."""

    HEADER = "# make-data: images left out of their batch, and files that are not images\n"

    def __init__(self, path: str, ignored: list[tuple[str, str]], resumed: bool):
        """Start the log at ``path`` (written at once), keeping an earlier run's
        lines when ``resumed``; ``ignored``: (path, why) of each entry of the sources
        not taken as an image."""
        self.path = path
        self._ignored = [f"ignored\t{name}\t{why}" for name, why in ignored]
        self._lines: dict[int, list[str]] = _earlier_lines(path) if resumed else {}
        self._write()

    def record(self, number: int, failures: list[tuple[str, str]]) -> None:
        self._lines[number] = [f"{batch_name(number)}\t{name}\t{reason}"
                               for name, reason in failures]
        self._write()

    def skipped(self) -> int:
        return sum(len(lines) for lines in self._lines.values())

    def _write(self) -> None:
        lines = [line for number in sorted(self._lines) for line in self._lines[number]]
        text = self.HEADER + "".join(f"{line}\n" for line in lines + self._ignored)
        write_output(self.path, text.encode("utf-8", "surrogateescape"))


def _earlier_lines(path: str) -> dict[int, list[str]]:
    """The skipped-image lines of an earlier log, by batch number."""
    lines: dict[int, list[str]] = {}
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as file:
            for line in file:
                first = line.split("\t", 1)[0]
                if first.startswith("data_batch_") and first[11:].isdigit():
                    lines.setdefault(int(first[11:]), []).append(line.rstrip("\n"))
    except OSError:
        pass  # no earlier log: nothing was skipped, or it is gone
    return lines
