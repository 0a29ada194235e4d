"""The command-line flags of the original cuda-convnet / cuda-convnet2 that this
command spells differently or does not have: the one table of them.

Most options keep the original's names (``--layer-def``, ``--mini``, ...).  A
person with the original's habits types the others; the parser accepts the
short spellings of :data:`SHORT_FLAGS`, and for a flag of :data:`RETIRED_FLAGS`
says what it did there and what to use here, instead of guessing a near name
(``--save-file`` is not ``--load-file``, ``--test-one`` is not ``--test-only``).
"""

from __future__ import annotations

#: Long option here -> the original's short spelling of it, also accepted.
SHORT_FLAGS = {"--load-file": "-f"}  # cuda-convnet's checkpoint to resume from

#: The original's flag -> what it did there and what to use here.
RETIRED_FLAGS = {
    "--save-file": "cuda-convnet2's --save-file named the checkpoint folder to save to; "
                   "here use --save-path DIR, the folder of the run's checkpoint "
                   "(DIR/checkpoint.npz)",
    "--test-one": "cuda-convnet2's --test-one tested on one test batch at a time; here "
                  "every test runs the whole --test-range: to test on one batch, give a "
                  "--test-range of one batch (e.g. --test-range 6)",
}


def retired_flag_hint(words: list[str]) -> str | None:
    """What to use here for the first of ``words`` (unrecognised arguments, maybe
    ``--flag=value``) that is one of the original's retired flags; None if none is."""
    for word in words:
        hint = RETIRED_FLAGS.get(word.split("=")[0])
        if hint is not None:
            return hint
    return None
