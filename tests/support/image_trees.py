"""Small image sources made on the spot: class-folder trees in every colour mode, and
fake ILSVRC-2012 tars with a devkit, so that no test downloads anything."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image


def photo(width: int, height: int, seed: int) -> np.ndarray:
    """A smooth (height, width, 3) uint8 picture that JPEG stores well."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    channels = [127 + 100 * np.sin(rng.uniform(1, 6) * x + rng.uniform(1, 6) * y + rng.uniform(0, 6))
                for _ in range(3)]
    return np.stack(channels, axis=-1).astype(np.uint8)


def image_bytes(width: int, height: int, seed: int, mode: str = "RGB", fmt: str = "JPEG") -> bytes:
    image = Image.fromarray(photo(width, height, seed))
    if mode == "P":
        image = image.quantize(16)
    elif mode == "RGBA":
        image = image.convert("RGBA")
        image.putalpha(Image.fromarray(np.full((height, width), 128, np.uint8)))
    elif mode != "RGB":
        image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def mixed_tree(root: Path) -> dict[str, list[str]]:
    """``root/CLASS/...`` with three classes in mixed formats and modes, one corrupt
    JPEG and one text file; class -> its readable images' names."""
    files = {
        "cat": [("a.jpg", image_bytes(40, 30, 1)), ("b_grey.jpg", image_bytes(30, 45, 2, "L")),
                ("c_cmyk.jpg", image_bytes(50, 40, 3, "CMYK")),
                ("deeper/d.png", image_bytes(33, 33, 4))],
        "dog": [("e_palette.png", image_bytes(36, 48, 5, "P", "PNG")),
                ("f_alpha.png", image_bytes(64, 40, 6, "RGBA", "PNG")),
                ("g.bmp", image_bytes(20, 16, 7, "RGB", "BMP")),
                ("h.webp", image_bytes(40, 40, 8, "RGB", "WEBP"))],
        "emu": [("i.gif", image_bytes(38, 38, 9, "P", "GIF")), ("j.jpeg", image_bytes(90, 60, 10)),
                ("k.JPG", image_bytes(32, 64, 11))],
    }
    for name, data in [*((f"{c}/{n}", d) for c, pairs in files.items() for n, d in pairs),
                       ("dog/broken.jpg", image_bytes(40, 40, 12)[:200]),
                       ("emu/notes.txt", b"not an image")]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return {c: [n for n, _ in pairs] for c, pairs in files.items()}


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def fake_ilsvrc(src: Path, images_per_synset: int, val_images: int,
                devkit_as_tar: bool = True) -> tuple[list[str], list[int]]:
    """ILSVRC-2012 look-alike files in ``src`` with three leaf synsets (and one inner
    synset the original skips); (label names, validation labels)."""
    import scipy.io

    src.mkdir(parents=True, exist_ok=True)
    synsets = [(2, "n02000002", "second thing"), (1, "n01000001", "first thing"),
               (1001, "n09999999", "an inner node"), (3, "n03000003", "third thing")]
    table = np.zeros((len(synsets), 1), dtype=[("ILSVRC2012_ID", object), ("WNID", object),
                                               ("words", object)])
    for row, (ident, wnid, words) in enumerate(synsets):
        table[row, 0] = (np.array([[ident]], dtype=np.uint16), np.array([wnid]), np.array([words]))
    meta = io.BytesIO()
    scipy.io.savemat(meta, {"synsets": table})
    with tarfile.open(src / "ILSVRC2012_img_train.tar", "w") as outer:
        for ident, wnid, _ in synsets[:2] + synsets[3:]:
            inner_bytes = io.BytesIO()
            with tarfile.open(fileobj=inner_bytes, mode="w") as inner:
                for k in range(images_per_synset):
                    _add(inner, f"{wnid}_{k}.JPEG", image_bytes(40 + k, 30, ident * 100 + k))
            _add(outer, f"{wnid}.tar", inner_bytes.getvalue())
    labels = [k % 3 for k in range(val_images)]
    with tarfile.open(src / "ILSVRC2012_img_val.tar", "w") as tar:
        for k in reversed(range(val_images)):  # stored out of order: read by name
            _add(tar, f"ILSVRC2012_val_{k + 1:08d}.JPEG", image_bytes(30, 50, 5000 + k))
    truth = "".join(f"{label + 1}\n" for label in labels).encode()
    if devkit_as_tar:
        with tarfile.open(src / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as tar:
            _add(tar, "ILSVRC2012_devkit_t12/data/meta.mat", meta.getvalue())
            _add(tar, "ILSVRC2012_devkit_t12/data/ILSVRC2012_validation_ground_truth.txt", truth)
    else:
        (src / "meta.mat").write_bytes(meta.getvalue())
        (src / "ILSVRC2012_validation_ground_truth.txt").write_bytes(truth)
    return ["first thing", "second thing", "third thing"], labels


def make_data(src: Path, tgt: Path, *options: str, capsys=None) -> tuple[int, str]:
    """Run ``python -m convnet.make_data`` in this process on one worker without a
    progress bar (tiny batches: 4 images, sub-batches of 2, 16-pixel images unless
    ``options`` say otherwise); (exit status, stderr) when ``capsys`` is given."""
    from convnet.make_data.cli import main

    defaults = {"--size": "16", "--batch-size": "4", "--sub-batch-size": "2", "--workers": "1"}
    given = set(options)
    args = [f"--src-dir={src}", f"--tgt-dir={tgt}", "--no-progress", *options]
    for flag, value in defaults.items():
        if flag not in given:
            args += [flag, value]
    code = main(args)
    return code, (capsys.readouterr().err if capsys is not None else "")


def load_batches(tgt: Path) -> dict[int, list[dict]]:
    """Every batch folder's sub-batch dicts, through the engine's safe unpickler (the
    JPEGs, Python 2 strings as in the original's files, turned back into bytes)."""
    from convnet.data.safe_pickle import load_dict

    batches = {}
    for folder in sorted(tgt.glob("data_batch_*")):
        number = int(folder.name.rsplit("_", 1)[1])
        parts = sorted(folder.iterdir(), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        assert [p.name for p in parts] == [f"data_batch_{number}.{k}" for k in range(len(parts))]
        batches[number] = [load_dict(p, ("data", "labels")) for p in parts]
        for part in batches[number]:
            assert all(isinstance(jpeg, str) for jpeg in part["data"])
            part["data"] = [jpeg.encode("latin1") for jpeg in part["data"]]
    return batches
