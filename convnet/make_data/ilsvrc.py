"""The ILSVRC-2012 files, read where they lie: the training tar (one tar per synset
inside it), the validation tar, and the devkit's ``meta.mat`` and validation ground
truth, either inside ``ILSVRC2012_devkit_t12.tar.gz`` (what the original
``make-data.py`` reads) or as the two files themselves.

Labels follow the original: a synset's label is its ``ILSVRC2012_ID`` - 1 (ids 1 to
1000, the leaf synsets), ``label_names`` are their ``words`` in label order, and the
ground truth's n-th line is the id of the n-th validation image (by file name).  The
tars are only listed here: the images stay byte ranges of the tar files
(:class:`~convnet.data.photos.sources.ImageRef`), so nothing is extracted to disk.
"""

from __future__ import annotations

import io
import os
import tarfile

from tqdm import tqdm

from convnet.errors import DataError
from convnet.data.photos.sources import DataSet, ImageRef, fingerprint
from convnet.optional import require_for_make_data

TRAIN_TAR = "ILSVRC2012_img_train.tar"
VAL_TAR = "ILSVRC2012_img_val.tar"
DEVKIT_TAR = "ILSVRC2012_devkit_t12.tar.gz"
META_MAT = "meta.mat"
GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"
#: Where the devkit keeps its two files, inside its tar and once unpacked.
DEVKIT_DATA = "ILSVRC2012_devkit_t12/data"


def is_ilsvrc_folder(src: str) -> bool:
    """Whether ``src`` holds the ILSVRC-2012 training tar (then it is read as ILSVRC)."""
    return os.path.isfile(os.path.join(src, TRAIN_TAR))


def ilsvrc_dataset(src: str, progress: bool) -> DataSet:
    """The training and validation images of the ILSVRC-2012 files in ``src``."""
    meta_mat, ground_truth = _devkit_files(src)
    synset_labels, label_names = _synsets(meta_mat)
    train, train_labels = _training_images(os.path.join(src, TRAIN_TAR), synset_labels, progress)
    test, test_labels = _validation_images(os.path.join(src, VAL_TAR), ground_truth,
                                           len(label_names))
    refs, labels = train + test, train_labels + [-1 - label for label in test_labels]
    return DataSet(train, train_labels, test, test_labels, label_names, [],
                   fingerprint([ref.name for ref in refs], refs, labels, label_names))


def _devkit_files(src: str) -> tuple[bytes, bytes]:
    """The bytes of ``meta.mat`` and of the validation ground truth."""
    for folder in (src, os.path.join(src, DEVKIT_DATA)):
        loose = [os.path.join(folder, name) for name in (META_MAT, GROUND_TRUTH)]
        if all(os.path.isfile(path) for path in loose):
            return tuple(_read(path) for path in loose)  # type: ignore[return-value]
    devkit = os.path.join(src, DEVKIT_TAR)
    if not os.path.isfile(devkit):
        raise DataError(f"{src}: the ILSVRC-2012 devkit is missing: put {DEVKIT_TAR} there, "
                        f"or its {META_MAT} and {GROUND_TRUTH}")
    try:
        with tarfile.open(devkit) as tar:
            return tuple(_tar_member(tar, devkit, f"{DEVKIT_DATA}/{name}")  # type: ignore
                         for name in (META_MAT, GROUND_TRUTH))
    except (OSError, tarfile.TarError, EOFError) as error:
        raise DataError(f"{devkit}: cannot read the devkit tar ({error})") from None


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as error:
        raise DataError(f"{path}: cannot read it ({error.strerror or error})") from None


def _tar_member(tar: tarfile.TarFile, path: str, name: str) -> bytes:
    try:
        member = tar.getmember(name)
    except KeyError:
        raise DataError(f"{path}: the devkit tar has no {name}") from None
    file = tar.extractfile(member)
    if file is None:
        raise DataError(f"{path}: {name} is not a regular file in the tar")
    return file.read()


def _synsets(meta_mat: bytes) -> tuple[dict[str, int], list[str]]:
    """WNID -> label (ILSVRC2012_ID - 1) and the label names, from ``meta.mat``."""
    require_for_make_data("scipy.io", "scipy", f"reading the devkit's {META_MAT}")
    import scipy.io

    try:
        synsets = scipy.io.loadmat(io.BytesIO(meta_mat))["synsets"].ravel()
        entries = [(int(s["ILSVRC2012_ID"].squeeze()), str(s["WNID"].squeeze()),
                    str(s["words"].squeeze())) for s in synsets]
    except Exception as error:  # loadmat raises many types on a corrupt file
        raise DataError(f"{META_MAT}: not the devkit's synset table ({type(error).__name__}: "
                        f"{error})") from None
    leaves = sorted((ident, wnid, words) for ident, wnid, words in entries if 1 <= ident <= 1000)
    if not leaves or [ident for ident, _, _ in leaves] != list(range(1, len(leaves) + 1)):
        raise DataError(f"{META_MAT}: the synsets' ILSVRC2012_ID values are not 1, 2, ..., n")
    return {wnid: ident - 1 for ident, wnid, _ in leaves}, [words for _, _, words in leaves]


def _open_tar(path: str, what: str) -> tarfile.TarFile:
    if not os.path.isfile(path):
        raise DataError(f"{path}: the ILSVRC-2012 {what} tar is missing")
    try:
        return tarfile.open(path, mode="r:")
    except (OSError, tarfile.TarError) as error:
        raise DataError(f"{path}: not an uncompressed tar, as the ILSVRC-2012 files are "
                        f"({error})") from None


def _training_images(path: str, synset_labels: dict[str, int], progress: bool
                     ) -> tuple[list[ImageRef], list[int]]:
    """Every image of every synset tar, as byte ranges of the training tar."""
    refs, labels = [], []
    try:
        with _open_tar(path, "training") as outer:
            synset_tars = [m for m in outer.getmembers() if m.isfile()]
            for member in tqdm(synset_tars, desc="listing the training tar", unit="synset",
                               disable=not progress or None, leave=False):
                wnid = os.path.basename(member.name).split(".")[0]
                if wnid not in synset_labels:
                    raise DataError(f"{path}: {member.name} is not a synset of the devkit's "
                                    f"{META_MAT}")
                with tarfile.open(fileobj=outer.extractfile(member), mode="r:") as inner:
                    for image in inner.getmembers():
                        if image.isfile():
                            refs.append(ImageRef(f"{member.name}/{image.name}", path,
                                                 member.offset_data + image.offset_data,
                                                 image.size))
                            labels.append(synset_labels[wnid])
    except (OSError, tarfile.TarError, EOFError) as error:
        raise DataError(f"{path}: cannot read the training tar ({error})") from None
    if not refs:
        raise DataError(f"{path}: the training tar holds no images")
    return refs, labels


def _validation_images(path: str, ground_truth: bytes, classes: int
                       ) -> tuple[list[ImageRef], list[int]]:
    """The validation images in file-name order, labelled by the ground truth."""
    try:
        with _open_tar(path, "validation") as tar:
            members = sorted((m for m in tar.getmembers() if m.isfile()), key=lambda m: m.name)
    except (OSError, tarfile.TarError, EOFError) as error:
        raise DataError(f"{path}: cannot read the validation tar ({error})") from None
    try:
        labels = [int(line) - 1 for line in ground_truth.decode("ascii").split()]
    except (UnicodeDecodeError, ValueError):
        raise DataError(f"{GROUND_TRUTH}: expected one class id (1-{classes}) per line") from None
    if len(labels) != len(members) or not all(0 <= label < classes for label in labels):
        raise DataError(f"{GROUND_TRUTH}: {len(labels)} class ids in 1-{classes} expected for "
                        f"the {len(members)} images of {path}")
    return [ImageRef(m.name, path, m.offset_data, m.size) for m in members], labels
