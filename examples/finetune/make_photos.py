"""Two small folders of class folders made from the bundled digits, for docs/FINETUNE.md.

``digit-photos/``: every digit as a 16x16 colour PNG in ``zero/`` ... ``nine/`` (the
base net's data); ``new-photos/``: the digits 0 to 3 mirrored left to right, in other
colours, in ``zero/`` ... ``three/`` (a new task of four classes to fine-tune on).
Run from any folder: ``python examples/finetune/make_photos.py OUT_DIR`` (needs Pillow).
"""

import sys
from pathlib import Path

import numpy as np
from PIL import Image

from convnet.data.digits import DIGITS_FILE

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def photo(digit: np.ndarray, ink, paper) -> Image.Image:
    """An 8x8 digit (0..16) as a 16x16 RGB picture, ink on paper."""
    grey = Image.fromarray(np.uint8(digit * 255 / 16)).resize((16, 16), Image.BILINEAR)
    share = np.asarray(grey, np.float32)[..., None] / 255
    return Image.fromarray(np.uint8(share * ink + (1 - share) * paper))


def main(out: Path) -> None:
    table = np.loadtxt(DIGITS_FILE, delimiter=",")
    rng = np.random.default_rng(0)
    for k, row in enumerate(table):
        digit, label = row[:64].reshape(8, 8), int(row[64])
        ink, paper = rng.uniform(0, 120, 3), rng.uniform(150, 255, 3)
        folder = out / "digit-photos" / NAMES[label]
        folder.mkdir(parents=True, exist_ok=True)
        photo(digit, ink, paper).save(folder / f"{k}.png")
        if label < 4:
            folder = out / "new-photos" / NAMES[label]
            folder.mkdir(parents=True, exist_ok=True)
            photo(digit[:, ::-1], paper, ink).save(folder / f"{k}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "."))
