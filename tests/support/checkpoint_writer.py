"""Helper for tests/app/test_checkpoint_kill.py: save checkpoints to one path until killed.

Usage: python tests/support/checkpoint_writer.py TARGET START.  Each save has different
contents and records in its meta what the arrays must add up to; after the
first save it prints "ready" so the test knows when to start its timer.
"""

import sys

import numpy as np

from convnet.app.checkpoint import save_checkpoint


def main() -> None:
    target, step = sys.argv[1], int(sys.argv[2])
    while True:
        size = 1000 + (step * 7919) % 30000
        weights = np.arange(size, dtype=np.float64) * step
        arrays = {"weights/conv1/W0": weights, "momentum/conv1/W0": -weights[: size // 2],
                  "step": np.array([step])}
        meta = {"step": step, "size": size, "total": float(weights.sum())}
        save_checkpoint(target, arrays, meta)
        if step == int(sys.argv[2]):
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
