"""What the command tells a person: hints that name the fix, the banner and the closing
summary, logs that read well under a pipe, and the optional 'plot' extra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from convnet.app.run.summary import cpu_cores
from tests.support import ROOT
from tests.support.cli import (DUMMY, EXAMPLES, assert_clean_error, checkpoint_arrays, ok,
                               run_cli, run_main)

REFERENCE = EXAMPLES / "cuda-convnet2"
PLAN_2GPU = ["--layer-def", REFERENCE / "layers-imagenet-2gpu-data.cfg",
             "--layer-params", REFERENCE / "layer-params-imagenet-2gpu-data.cfg",
             "--data-dims", "3x64x64", "--num-classes", "1000", "--print-plan"]
SINGLE = ["--layer-def", EXAMPLES / "digits-single.cfg",
          "--layer-params", EXAMPLES / "digits-params.cfg"]


def test_too_few_devices_suggests_the_gpu_lists_that_fit():
    assert_clean_error(run_cli(*PLAN_2GPU, "--gpu", "0"), 2, "past the --gpu list",
                       "give --gpu 0,1, or --gpu 0,0 for 2 logical devices on device 0")


def test_a_device_index_past_what_a_run_can_have_suggests_no_gpu_list(tmp_path, capsys):
    """gpu=99 names 100 logical devices, more than --gpu may list: no list is offered."""
    layers = tmp_path / "layers.cfg"
    layers.write_text((EXAMPLES / "digits-single.cfg").read_text()
                      .replace("gpu=0", "gpu=99", 1))
    code, _, err = run_main(capsys, "--layer-def", layers, "--layer-params", SINGLE[3],
                            "--data-dims", "1x8x8", "--num-classes", "10", "--print-plan")
    line = assert_clean_error((code, err), 2, "[conv1] key 'gpu'", "device index 99",
                              "the config uses 100 logical devices, more than the 64 a run "
                              "can have: give gpu= indices below 64")
    assert "--gpu 0,1" not in line


def test_class_count_mismatch_suggests_num_classes():
    assert_clean_error(run_cli(*SINGLE, "--data-dims", "1x8x8", "--num-classes", "12",
                               "--print-plan"), 2, "give --num-classes 10")


def test_help_names_the_program_as_invoked(tmp_path):
    link = tmp_path / "convnet"  # as the installed console script is named
    link.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                    "from convnet.app.command_line.main import main\nsys.exit(main())\n")
    out = subprocess.run([sys.executable, str(link), "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("usage: convnet [-h]") and "\n  convnet --save-path runs/a" in out
    assert ok(run_cli("--help")).stdout.startswith("usage: convnet.py [-h]")


def _without_matplotlib(tmp_path: Path) -> dict:
    blocker = tmp_path / "blocker" / "matplotlib"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('no matplotlib here')\n")
    return {"PYTHONPATH": os.pathsep.join([str(blocker.parent), str(ROOT)])}


def test_pictures_without_matplotlib_name_the_plot_extra(tmp_path):
    env = _without_matplotlib(tmp_path)
    assert_clean_error(run_cli(*SINGLE, "--data-dims", "1x8x8", "--print-plan",
                               "--plan-graph", tmp_path / "g.png", env=env), 1,
                       "--plan-graph draws with matplotlib", "pip install -e '.[plot]'")
    assert_clean_error(run_cli("--compare", EXAMPLES / "digits-single.cfg",
                               EXAMPLES / "digits-data.cfg", "--layer-params",
                               EXAMPLES / "digits-params.cfg",
                               "--save-path", tmp_path / "c", env=env), 1,
                       "'plot' extra")
    assert not (tmp_path / "c").exists()  # refused before any training
    # training itself needs no matplotlib: it says why there is no log.png
    run = ok(run_cli(*DUMMY, "--epochs", "1", "--save-path", tmp_path / "run", env=env))
    assert "no log.png: drawing it needs matplotlib" in run.stdout
    assert "watch " not in run.stdout  # no picture to watch
    assert (tmp_path / "run" / "log.csv").exists() and not (tmp_path / "run" / "log.png").exists()


def test_banner_summary_log_and_picture_under_a_pipe(tmp_path):
    """Under a pipe: no progress bar, the banner and the summary, a LF-only log.csv and
    log.png next to it; the printed command resumes the run."""
    folder = tmp_path / "run"
    run = ok(run_cli(*[a for a in DUMMY if a != "--no-progress"], "--epochs", "2",
                     "--save-path", folder, cwd=tmp_path))
    assert "\r" not in run.stderr and "minibatch/s" not in run.stderr  # no bar on a pipe
    lines = run.stdout.splitlines()
    assert lines[0].startswith("training ") and "hybrid scheme" in lines[0]
    assert "minibatch 128 cases = 2 shards of 64" in lines[0]
    assert lines[1].startswith("cpu backend, logical device -> physical: 0 -> CPU worker 0")
    assert lines[3] == "saving to run/ (checkpoint.npz, log.csv, log.png)"
    assert lines[4] == "watch run/log.png: cost and error against epochs, redrawn at every test"
    assert lines[-3].startswith("finished in ") and "final test error" in lines[-3]
    assert lines[-2] == "saved: run/checkpoint.npz, run/log.csv, run/log.png"
    assert lines[-1].endswith("convnet.py --load-file run --epochs 4")
    assert b"\r\n" not in (folder / "log.csv").read_bytes()
    assert (folder / "log.png").read_bytes()[:4] == b"\x89PNG"
    resumed = ok(run_cli("--load-file", folder, "--epochs", "3", "--no-progress",
                         cwd=tmp_path))
    assert "resuming run/checkpoint.npz at end of epoch 2" in resumed.stdout
    assert "saved: run/checkpoint.npz" in resumed.stdout  # relative on resume too
    assert checkpoint_arrays(folder / "checkpoint.npz")[1]["counters"]["epoch"] == 3


def test_nothing_to_train_prints_no_checkpoint_line(tmp_path):
    ok(run_cli(*DUMMY, "--epochs", "1", "--save-path", tmp_path / "run"))
    again = ok(run_cli("--load-file", tmp_path / "run"))
    assert "nothing to train" in again.stdout and "checkpoint:" not in again.stdout
    assert "saved:" not in again.stdout


def test_oversubscribed_cpu_devices_and_a_capped_minibatch_are_warned_about(tmp_path):
    count = os.cpu_count() + 1
    mini, cases = 64 * count, 16 * count  # multiples of the replica count
    layer_def = tmp_path / "wide.cfg"  # digits-data with a replica on every device
    layer_def.write_text((EXAMPLES / "digits-data.cfg").read_text()
                         .replace("gpu=0,1", f"gpu={','.join(map(str, range(count)))}"))
    run = ok(run_cli(*DUMMY, "--layer-def", layer_def, "--layer-params",
                     EXAMPLES / "digits-params.cfg", "--gpu", ",".join(["0"] * count),
                     "--mini", mini, "--dummy-cases", cases, "--epochs", "1"))
    assert "logical CPU devices share" in run.stderr
    assert (f"--mini {mini} is larger than a data batch ({cases} cases)" in run.stderr
            and "--dummy-cases" in run.stderr)
    assert f"minibatch {cases} cases (--mini {mini} capped at a data batch)" in run.stdout


def test_devices_that_no_layer_uses_are_named_and_not_counted_as_sharing(capsys):
    """--gpu 0,1,2 for the bundled two-device net: device 2 idles, and two busy devices
    do not outnumber two cores."""
    code, _, err = run_main(capsys, *DUMMY, "--gpu", "0,1,2", "--epochs", "1",
                            "--test-range", "2")
    assert code == 0, err
    assert ("warning: logical device(s) 2 of the 3 that --gpu gives run no layer and stay "
            "idle: the config's gpu= lists name 0-1") in err
    assert ("share" in err) == (cpu_cores() < 2)


def test_dummy_cases_sets_the_batch_size_and_only_for_dummy_data():
    run = ok(run_cli(*DUMMY, "--dummy-cases", "32", "--mini", "32", "--epochs", "1"))
    assert "(32 cases in the first)" in run.stdout
    assert_clean_error(run_cli("--dummy-cases", "32"), 2, "--dummy-cases",
                       "'digits' data has its own")


def test_write_features_without_a_path_says_where(tmp_path):
    run = ok(run_cli(*DUMMY, "--epochs", "1", "--write-features", "fc10", cwd=tmp_path))
    assert f"go to {tmp_path / 'features-fc10'}" in run.stdout
    assert (tmp_path / "features-fc10" / "data_batch_9.npz").exists()


def test_plan_graph_alone_says_that_nothing_is_trained(tmp_path):
    """--plan-graph makes a planning run, like --print-plan: given beside training
    options it must say, in its one line on stderr, that it did not train."""
    run = ok(run_cli(*DUMMY, "--plan-graph", tmp_path / "g.png", "--epochs", "1",
                     "--save-path", tmp_path / "run"))
    said = [l for l in run.stderr.splitlines() if "wrote the layer graph" in l]
    assert len(said) == 1 and "nothing was trained" in said[0], run.stderr
    assert not (tmp_path / "run").exists() and (tmp_path / "g.png").is_file()
    both = ok(run_cli(*DUMMY, "--print-plan", "--plan-graph", tmp_path / "h.png"))
    assert "nothing was trained" not in both.stderr  # --print-plan says it already


def test_colour_noise_on_one_channel_data_says_what_it_does():
    run = ok(run_cli(*DUMMY, "--color-noise", "0.5", "--epochs", "1"))
    said = [l for l in run.stderr.splitlines() if "--color-noise" in l]
    assert len(said) == 1 and said[0].startswith("warning: "), run.stderr
    assert "one channel" in said[0] and "brightness" in said[0]
    assert "--color-noise" not in ok(run_cli(*DUMMY, "--epochs", "1")).stderr


def test_batches_smaller_than_mini_get_a_mini_the_net_accepts(capsys):
    """Two replicas: --mini must be even, so a batch of 5 cases suggests --mini 4, and
    a batch of 1 case, which no minibatch of two shards can be cut from, is refused
    naming the batch and what would do."""
    data_parallel = ["--layer-def", EXAMPLES / "digits-data.cfg", "--layer-params",
                     EXAMPLES / "digits-params.cfg", "--data-dims", "1x8x8", "--num-classes",
                     "10", "--train-range", "1", "--test-range", "9", "--epochs", "1",
                     "--no-progress"]
    code, _, err = run_main(capsys, *data_parallel, "--dummy-cases", "5")
    assert code == 0, err
    assert "give --mini 4 or less or more cases per batch" in err
    code, _, err = run_main(capsys, *data_parallel, "--dummy-cases", "1")
    assert_clean_error((code, err), 1, "batch 1 holds 1 case(s), too few for the 2 shards "
                                       "of a minibatch", "at least 2 cases")


def test_a_checkpoint_kept_by_max_test_err_is_not_called_saved(tmp_path, capsys):
    """Resumed with a --max-test-err no test meets, the run saves nothing: its summary
    must not list the checkpoint as saved, and says where it still stands."""
    run = tmp_path / "run"
    code, _, err = run_main(capsys, *SINGLE, "--no-progress", "--epochs", "1",
                            "--save-path", run)
    assert code == 0, err
    before = (run / "checkpoint.npz").read_bytes()
    code, out, err = run_main(capsys, "--load-file", run, "--epochs", "2", "--no-progress",
                              "--max-test-err", "0.01")
    assert code == 0, err
    assert (run / "checkpoint.npz").read_bytes() == before
    saved = [line for line in out.splitlines() if line.startswith("saved: ")]
    assert len(saved) == 1 and "checkpoint.npz" not in saved[0], out
    kept = [line for line in out.splitlines() if line.startswith("checkpoint: ")]
    assert len(kept) == 1 and kept[0].endswith(
        "checkpoint.npz (end of epoch 1): no later test was within --max-test-err 1.00%"), out


def test_test_batches_that_are_also_trained_on_are_said_so(capsys):
    """cuda-convnet's last step trains on every batch (1-6, testing on 6): allowed, but the
    test error is then not measured on held-out images, and the banner says so."""
    code, out, _ = run_main(capsys, "--no-progress", "--epochs", "1", "--train-range", "5-6",
                            "--test-range", "4-6")
    assert code == 0
    assert "test 4-6 (5-6 also trained on: not held out);" in out
    code, out, _ = run_main(capsys, "--no-progress", "--epochs", "1")
    assert "also trained on" not in out
