"""End to end: the real ``convnet.py`` trains, saves, resumes, tests and writes features.

The digits runs use the bundled example's net and data (two logical devices,
hybrid parallel), shortened to two epochs of 64-case minibatches.  Checks that
need no real data use the same net on the synthetic ``dummy`` provider, which
starts faster.
"""

from __future__ import annotations

import hashlib
import json
import signal
import time

import numpy as np
import pytest

from tests.support.cli import (DIGITS, DUMMY, EXAMPLES, SINGLE_DEF, SINGLE_PARAMS,
                               assert_clean_error, assert_same_arrays, checkpoint_arrays, ok,
                               parse_test_line, read_log, run_cli, start_cli)

COLUMNS = ["time_spent", "cumulative_time", "inputs_per_sec", "cost", "error", "epoch", "batch",
           "learning_rate", "test_cost", "test_error"]
#: Two epochs of the five digits training batches, testing every two batches and at
#: the end of each epoch: after global batches 2, 4, 5 | 6, 8, 10.
DIGITS_RUN = DIGITS + ["--epochs", "2", "--test-freq", "2"]
DIGITS_ROWS = [("1", "2"), ("1", "4"), ("1", "5"), ("2", "1"), ("2", "3"), ("2", "5")]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """One uninterrupted digits run, saved; tests below only read it."""
    folder = tmp_path_factory.mktemp("digits") / "run"
    proc = ok(run_cli(*DIGITS_RUN, "--save-path", folder))
    return folder, proc


@pytest.fixture(scope="module")
def dummy_run(tmp_path_factory):
    """Two epochs of the digits net on dummy data (two batches each), saved."""
    folder = tmp_path_factory.mktemp("dummy") / "run"
    proc = ok(run_cli(*DUMMY, "--epochs", "2", "--save-path", folder))
    return folder, proc


def test_training_prints_a_line_per_test_and_logs_a_csv_row(digits_run):
    folder, proc = digits_run
    lines = [l for l in proc.stdout.splitlines() if l.startswith("epoch")]
    assert len(lines) == len(DIGITS_ROWS)
    for line in lines:
        for word in ("batch", "train cost", "error", "test cost", "img/s", "lr 0.05"):
            assert word in line, line
    header, rows = read_log(folder / "log.csv")
    assert header == COLUMNS
    assert [(r["epoch"], r["batch"]) for r in rows] == DIGITS_ROWS
    for row in rows:
        values = {k: float(v) for k, v in row.items()}
        assert values["time_spent"] > 0 and values["inputs_per_sec"] > 0
        assert 0 <= values["error"] <= 1 and 0 <= values["test_error"] <= 1
        assert values["learning_rate"] == 0.05
    cumulative = [float(r["cumulative_time"]) for r in rows]
    assert cumulative == sorted(cumulative)
    assert float(rows[-1]["test_error"]) < 0.15  # it learns
    assert float(rows[-1]["test_cost"]) < float(rows[0]["test_cost"])


def test_checkpoint_holds_weights_momentum_counters_and_options(digits_run):
    folder, _ = digits_run
    arrays, meta = checkpoint_arrays(folder / "checkpoint.npz")
    assert {"weights/conv1/W0", "momentum/conv1/W0", "weights/fc10/W1", "weights/fc10/b"} \
        <= set(arrays)
    assert meta["counters"]["step"] == 2 * 5 * 5  # 300-case batches: 4 x 64 cases + a tail
    assert meta["counters"]["log_rows"] == len(DIGITS_ROWS)
    assert meta["options"]["mini"] == 64 and meta["options"]["gpu"] == [0, 1]
    assert meta["options"]["epochs"] == 2 and meta["options"]["test_freq"] == 2
    assert meta["rng"]["seed"] == 0
    json.dumps(meta)


def test_test_only_reproduces_the_logged_test_error_and_writes_features(digits_run, tmp_path):
    folder, _ = digits_run
    before = {p.name: digest(p) for p in folder.iterdir()}
    features = tmp_path / "features"
    proc = ok(run_cli("--load-file", folder / "checkpoint.npz", "--test-only",
                      "--write-features", "probs", "--feature-path", features))
    cost, error, cases = parse_test_line(proc.stdout)
    _, rows = read_log(folder / "log.csv")
    assert cases == 299
    assert error == pytest.approx(float(rows[-1]["test_error"]), abs=1e-6)
    assert cost == pytest.approx(float(rows[-1]["test_cost"]), abs=1e-6)
    # features: one file per test batch, cases x outputs of the layer
    with np.load(features / "data_batch_6.npz") as f:
        data, labels = f["data"], f["labels"]
    assert data.shape == (299, 10) and labels.shape == (299,)
    np.testing.assert_allclose(data.sum(axis=1), 1.0, rtol=1e-5)  # softmax rows
    assert np.mean(data.argmax(axis=1) != labels) == pytest.approx(error, abs=1e-6)
    # --test-only saves nothing
    assert {p.name: digest(p) for p in folder.iterdir()} == before


def test_resume_from_a_mid_run_checkpoint_gives_bitwise_the_same_weights(digits_run, tmp_path):
    reference, _ = digits_run
    folder = tmp_path / "run"
    proc = start_cli(*DIGITS_RUN, "--save-path", folder)
    checkpoint = folder / "checkpoint.npz"
    deadline = time.monotonic() + 60
    while not checkpoint.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    _, meta = checkpoint_arrays(checkpoint)
    final_step = checkpoint_arrays(reference / "checkpoint.npz")[1]["counters"]["step"]
    assert 0 < meta["counters"]["step"] < final_step, "the kill came after the run ended"
    # resume with no options but the checkpoint: every option comes from it
    ok(run_cli("--no-progress", "--load-file", folder))
    assert_same_arrays(checkpoint_arrays(checkpoint)[0],
                       checkpoint_arrays(reference / "checkpoint.npz")[0])
    # and the log is that of an uninterrupted run: same rows, same numbers
    _, rows = read_log(folder / "log.csv")
    _, expected = read_log(reference / "log.csv")
    same = ["epoch", "batch", "cost", "error", "learning_rate", "test_cost", "test_error"]
    assert [[r[k] for k in same] for r in rows] == [[r[k] for k in same] for r in expected]


def test_a_checkpoint_loads_on_another_device_count(digits_run, tmp_path):
    """Replicas are identical, so weights saved from the hybrid two-device run load into
    the same layers on one device (the same function up to summation order)."""
    folder, _ = digits_run
    _, rows = read_log(folder / "log.csv")
    proc = ok(run_cli("--load-file", folder, "--test-only", "--gpu", "0",
                      "--layer-def", SINGLE_DEF, "--layer-params", SINGLE_PARAMS))
    cost, error, _ = parse_test_line(proc.stdout)
    assert cost == pytest.approx(float(rows[-1]["test_cost"]), rel=1e-4)
    assert error == pytest.approx(float(rows[-1]["test_error"]), abs=1.5 / 299)


def test_resume_with_too_few_devices_explains_the_fix(dummy_run):
    folder, _ = dummy_run
    proc = run_cli("--load-file", folder, "--gpu", "0", "--epochs", "3")
    assert_clean_error(proc, 2, "past the --gpu list", "--gpu 0,1", "--gpu 0,0")


def test_resume_on_one_physical_device_listed_twice(dummy_run, tmp_path):
    folder, _ = dummy_run
    other = tmp_path / "other"
    proc = ok(run_cli("--load-file", folder, "--gpu", "0,0", "--epochs", "3",
                      "--save-path", other, "--no-progress"))
    assert "epoch   3" in proc.stdout
    _, meta = checkpoint_arrays(other / "checkpoint.npz")
    assert meta["options"]["gpu"] == [0, 0] and meta["counters"]["epoch"] == 3
    _, rows = read_log(other / "log.csv")
    assert [r["epoch"] for r in rows] == ["3"]  # a new save path starts its own log


def test_resuming_a_finished_run_trains_nothing(dummy_run):
    folder, _ = dummy_run
    before = digest(folder / "checkpoint.npz")
    proc = ok(run_cli("--load-file", folder / "checkpoint.npz", "--no-progress"))
    assert "nothing to train" in proc.stdout and "--epochs" in proc.stdout
    assert digest(folder / "checkpoint.npz") == before


def test_epochs_test_freq_and_ranges_shape_the_log(tmp_path):
    ok(run_cli(*DUMMY, "--train-range", "1-3", "--test-range", "9,10", "--epochs", "2",
               "--test-freq", "2", "--save-path", tmp_path))
    _, rows = read_log(tmp_path / "log.csv")
    # every 2 batches (global 2, 4, 6) and at each epoch's end (3, 6)
    assert [(r["epoch"], r["batch"]) for r in rows] == [("1", "2"), ("1", "3"), ("2", "1"),
                                                        ("2", "3")]
    _, meta = checkpoint_arrays(tmp_path / "checkpoint.npz")
    assert meta["counters"]["step"] == 6 * 4  # 512-case batches, minibatches of 128
    assert meta["options"]["train_range"] == "1-3" and meta["options"]["test_range"] == "9,10"


def test_max_test_err_and_force_save(tmp_path):
    strict = tmp_path / "strict"
    proc = ok(run_cli(*DUMMY, "--epochs", "1", "--max-test-err", "0.0001",
                      "--save-path", strict))
    assert "not saved" in proc.stdout
    assert not (strict / "checkpoint.npz").exists()
    assert (strict / "log.csv").exists()  # the log is kept anyway
    forced = tmp_path / "forced"
    proc = ok(run_cli(*DUMMY, "--epochs", "1", "--max-test-err", "0.0001", "--force-save",
                      "--save-path", forced))
    assert (forced / "checkpoint.npz").exists()
    loose = tmp_path / "loose"
    ok(run_cli(*DUMMY, "--epochs", "1", "--max-test-err", "1", "--save-path", loose))
    assert (loose / "checkpoint.npz").exists()


def test_augmentation_and_mean_options_change_training(dummy_run, tmp_path):
    """--inner-size (mirrors at the full size), --color-noise and --scalar-mean each change
    what is trained on, so the weights differ from the plain run."""
    plain, _ = dummy_run
    folder = tmp_path / "aug"
    ok(run_cli(*DUMMY, "--epochs", "2", "--inner-size", "8", "--color-noise", "0.5",
               "--scalar-mean", "0.25", "--save-path", folder))
    a, meta = checkpoint_arrays(folder / "checkpoint.npz")
    b, _ = checkpoint_arrays(plain / "checkpoint.npz")
    assert not np.array_equal(a["weights/conv1/W0"], b["weights/conv1/W0"])
    assert meta["options"]["inner_size"] == 8 and meta["options"]["color_noise"] == 0.5
    assert meta["options"]["scalar_mean"] == 0.25
    # multiview testing: the centre view and its mirror image, averaged
    proc = ok(run_cli("--load-file", folder, "--test-only", "--multiview-test"))
    assert "2 views averaged" in proc.stdout
    assert parse_test_line(proc.stdout)[1] < 0.5


def test_local_sgd_trains_saves_and_resumes(dummy_run, tmp_path):
    """--sync local:K changes the training of the data-parallel layers and is resumed
    with it."""
    plain, _ = dummy_run
    folder = tmp_path / "local"
    ok(run_cli(*DUMMY, "--epochs", "1", "--sync", "local:3", "--save-path", folder))
    a, meta = checkpoint_arrays(folder / "checkpoint.npz")
    assert meta["options"]["sync"] == "local:3"
    proc = ok(run_cli("--load-file", folder, "--epochs", "2"))
    assert "final test error" in proc.stdout
    b, meta = checkpoint_arrays(folder / "checkpoint.npz")
    assert meta["options"]["sync"] == "local:3" and meta["counters"]["epoch"] == 2
    synced, _ = checkpoint_arrays(plain / "checkpoint.npz")
    assert not np.array_equal(b["weights/conv1/W0"], synced["weights/conv1/W0"])


def test_layer_sync_keys_train_save_and_resume(tmp_path):
    """The example's fc layers average every 8 steps by their sync= keys while the
    convolutions all-reduce: it trains, resumes from its checkpoint, and trains
    otherwise than the same net without the keys."""
    data_parallel = [*DUMMY, "--layer-def", EXAMPLES / "digits-data.cfg", "--gpu", "0,1"]
    keyed, plain = tmp_path / "keyed", tmp_path / "plain"
    ok(run_cli(*data_parallel, "--layer-params", EXAMPLES / "digits-local-fc-params.cfg",
               "--epochs", "1", "--save-path", keyed))
    proc = ok(run_cli("--load-file", keyed, "--epochs", "2"))
    assert "final test error" in proc.stdout
    a, meta = checkpoint_arrays(keyed / "checkpoint.npz")
    assert meta["options"]["sync"] == "sync" and meta["counters"]["epoch"] == 2
    ok(run_cli(*data_parallel, "--layer-params", EXAMPLES / "digits-params.cfg",
               "--epochs", "2", "--save-path", plain))
    b, _ = checkpoint_arrays(plain / "checkpoint.npz")
    assert not np.array_equal(a["weights/fca/W0"], b["weights/fca/W0"])


def test_logreg_name_and_features_after_training(dummy_run, tmp_path):
    folder, _ = dummy_run
    proc = ok(run_cli("--load-file", folder, "--test-only", "--logreg-name", "logprob"))
    assert "(logprob)" in proc.stdout
    proc = run_cli("--load-file", folder, "--test-only", "--logreg-name", "probs")
    assert_clean_error(proc, 2, "'probs' is not a cost layer", "logprob")
    out = tmp_path / "run"
    ok(run_cli(*DUMMY, "--epochs", "1", "--save-path", out, "--write-features", "conv1"))
    with np.load(out / "features-conv1" / "data_batch_9.npz") as f:
        assert f["data"].shape == (512, 32 * 8 * 8) and f["labels"].shape == (512,)


def test_print_plan_text_and_json_for_the_imagenet_hybrid_config():
    args = ["--layer-def", EXAMPLES / "cuda-convnet2/layers-imagenet-4gpu-data-model.cfg",
            "--layer-params", EXAMPLES / "cuda-convnet2/layer-params-imagenet-4gpu-data-model.cfg",
            "--gpu", "0,1,2,3", "--mini", "512", "--data-dims", "3x224x224",
            "--num-classes", "1000"]
    text = ok(run_cli(*args, "--print-plan")).stdout
    assert "Scheme: hybrid" in text and "4 pass(es)" in text
    assert "9216" in text or "6x6" in text  # pool3 is 256x6x6
    plan = json.loads(ok(run_cli(*args, "--print-plan=json")).stdout)
    assert plan["scheme"] == "hybrid" and plan["num_passes"] == 4
    assert plan["minibatch"] == 512 and plan["shard_size"] == 128
    conv1 = next(l for l in plan["layers"] if l["name"] == "conv1")
    assert conv1["replicas"] == 4 and conv1["output_shape"] == [64, 55, 55]


def test_check_grads_passes_on_the_all_layers_example():
    proc = ok(run_cli("--check-grads", "--layer-def", EXAMPLES / "all-layers.cfg",
                      "--layer-params", EXAMPLES / "all-layers-params.cfg",
                      "--data-dims", "3x8x8", "--num-classes", "4"))
    assert "gradient check passed" in proc.stdout
    assert "FAIL" not in proc.stdout


@pytest.mark.slow
def test_the_bundled_example_reaches_97_percent_within_a_minute():
    """``python convnet.py`` with no arguments: the hybrid digits example on two logical
    devices (the README's promise; run with ``pytest -m slow``)."""
    start = time.monotonic()
    proc = ok(run_cli(timeout=300))
    elapsed = time.monotonic() - start
    lines = [l for l in proc.stdout.splitlines() if l.startswith("epoch")]
    assert len(lines) == 30
    final_error = float(lines[-1].split("error")[2].split("%")[0])
    assert final_error <= 3.0, lines[-1]
    assert elapsed < 60, f"{elapsed:.1f} s"
