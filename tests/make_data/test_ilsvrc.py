"""make-data on fake ILSVRC-2012 files: read from the tars in place, labelled and
numbered as the original's make-data.py does."""

from __future__ import annotations

import pytest

from convnet.data.safe_pickle import load_dict
from convnet.data.photos.convert import square_jpeg
from tests.support.image_trees import fake_ilsvrc, image_bytes, load_batches, make_data

pytest.importorskip("scipy")


@pytest.mark.parametrize("devkit_as_tar", [True, False])
def test_training_batches_from_0_and_validation_from_1000(tmp_path, devkit_as_tar):
    names, val_labels = fake_ilsvrc(tmp_path / "src", images_per_synset=3, val_images=5,
                                    devkit_as_tar=devkit_as_tar)
    code, _ = make_data(tmp_path / "src", tmp_path / "out")
    assert code == 0
    batches = load_batches(tmp_path / "out")
    assert sorted(batches) == [0, 1, 2, 1000, 1001]  # 9 training images, 5 validation
    meta = load_dict(tmp_path / "out" / "batches.meta", ("label_names", "num_vis"))
    assert meta["label_names"] == names  # by ILSVRC2012_ID; the inner synset left out
    # validation images in file-name order, each with its ground-truth label
    stored = [(jpeg, labels) for n in (1000, 1001) for part in batches[n]
              for jpeg, labels in zip(part["data"], part["labels"])]
    expected = [square_jpeg(image_bytes(30, 50, 5000 + k), 16) for k in range(5)]
    assert [jpeg for jpeg, _ in stored] == expected
    assert [labels for _, labels in stored] == [[label] for label in val_labels]


def test_each_training_image_has_its_synsets_label(tmp_path):
    fake_ilsvrc(tmp_path / "src", images_per_synset=2, val_images=1)
    assert make_data(tmp_path / "src", tmp_path / "out")[0] == 0
    # synset ids 1, 2, 3 made images seeded 100 + k, 200 + k, 300 + k
    expected = {square_jpeg(image_bytes(40 + k, 30, ident * 100 + k), 16): ident - 1
                for ident in (1, 2, 3) for k in range(2)}
    stored = [(jpeg, labels) for n, parts in load_batches(tmp_path / "out").items() if n < 1000
              for part in parts for jpeg, labels in zip(part["data"], part["labels"])]
    assert sorted(jpeg for jpeg, _ in stored) == sorted(expected)
    assert all(labels == [expected[jpeg]] for jpeg, labels in stored)


@pytest.mark.parametrize("missing", ["ILSVRC2012_devkit_t12.tar.gz", "ILSVRC2012_img_val.tar"])
def test_a_missing_file_is_one_line(tmp_path, capsys, missing):
    fake_ilsvrc(tmp_path / "src", images_per_synset=1, val_images=1)
    (tmp_path / "src" / missing).unlink()
    code, err = make_data(tmp_path / "src", tmp_path / "out", capsys=capsys)
    assert code == 1 and err.count("\n") == 1 and missing in err


def test_ground_truth_that_disagrees_with_the_validation_tar_is_refused(tmp_path, capsys):
    fake_ilsvrc(tmp_path / "src", images_per_synset=1, val_images=3, devkit_as_tar=False)
    (tmp_path / "src" / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n2\n")
    code, err = make_data(tmp_path / "src", tmp_path / "out", capsys=capsys)
    assert code == 1 and err.count("\n") == 1 and "ground_truth" in err
    assert not (tmp_path / "out").exists()


def test_without_scipy_the_error_names_the_extra(tmp_path, capsys, monkeypatch):
    import builtins

    fake_ilsvrc(tmp_path / "src", images_per_synset=1, val_images=1)
    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    code, err = make_data(tmp_path / "src", tmp_path / "out", capsys=capsys)
    assert code == 1 and err.count("\n") == 1 and "'make-data' extra" in err


def test_the_run_ends_with_the_ranges_to_train_with(tmp_path, capsys):
    fake_ilsvrc(tmp_path / "src", images_per_synset=3, val_images=5)
    assert make_data(tmp_path / "src", tmp_path / "out")[0] == 0
    out = capsys.readouterr().out
    assert "14 images in 3 training and 2 test batch(es); all written now" in out
    assert out.splitlines()[-1] == (f"train with: --data-path {tmp_path / 'out'} --data-provider "
                                    f"image --train-range 0-2 --test-range 1000-1001")
