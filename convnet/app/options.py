"""The options of one run, typed and complete, from the command line and a checkpoint.

The parser leaves every option a checkpoint remembers
(:data:`convnet.app.saved_options.RESUMABLE`) at
``None`` when it is not given, so that its value can be resolved here in this
order: the command line, then the checkpoint of ``--load-file``, then the
bundled example's value when no ``--layer-def`` is given, then the built-in
default.  :func:`resolve_options` does that once and checks that the options
go together, before any work is done; training, ``--compare`` and the tools
all read the :class:`RunOptions` it returns.
"""

from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass, fields
from pathlib import Path

from convnet.app import bundled_example, launch
from convnet.app.option_values import MAX_DEVICES, slow_device_text
from convnet.app.checkpoint import CheckpointReader, find_checkpoint
from convnet.app.saved_options import Resume, check_saved_config_file, read_resume
from convnet.config import parse_net
from convnet.data.photos.provider import image_size_unread
from convnet.errors import ConvnetError, DataError, UsageError
from convnet.filekind import cannot_write_folder
from convnet.optional import require_tensorboard
from convnet.outputs import refuse_existing
from convnet.plan.schedules import DEFAULT_SCHEDULE
from convnet.runtime.devices.backends import gpus_for_backend
from convnet.simulate.hardware import device_kind

@dataclass(frozen=True)
class RunOptions:
    """Everything one run takes from its user, resolved and checked.

    The names are the command-line options' (``--layer-def`` is ``layer_def``);
    ``None`` means an optional option that is not in effect.
    """

    # network
    layer_def: Path
    layer_params: Path
    gpu: tuple[int, ...]
    backend: str
    mini: int
    micro_batches: int  # pieces per shard (docs/PIPELINE.md)
    pipeline_schedule: str  # how the micro-batches flow (convnet.plan.schedules.SCHEDULES)
    seed: int
    sync: str  # "sync", "local:K" or "async:S" (see option_values.sync_mode)
    precision: str  # the layers' arithmetic (convnet.runtime.step.precision.PRECISIONS)
    # data
    data_provider: str
    data_path: Path | None
    data_dims: str | None
    num_classes: int | None
    dummy_cases: int | None
    train_range: str | None
    test_range: str | None
    inner_size: int
    image_size: int  # photos in class folders are brought to this side
    color_noise: float
    scalar_mean: float | None
    multiview_test: bool
    skip_bad_images: bool
    prefetch: int  # batches the loader may have ready ahead of the one training
    # training
    epochs: int
    test_freq: int | None
    save_path: Path | None
    force_save: bool
    overwrite: bool
    max_test_err: float | None
    test_only: bool
    logreg_name: str | None
    write_features: str | None
    feature_path: Path | None
    tensorboard: Path | None  # the folder of TensorBoard event files
    profile: bool
    sequential: bool
    slow_device: tuple[int | None, float] | None  # test-only: (logical device or None for
    # one drawn at random each step, slowdown factor)
    no_progress: bool
    rank_timeout: float | None  # seconds a wait on another rank may last; None: no bound
    # tools
    print_plan: str | None  # "text" or "json"
    plan_graph: Path | None
    simulate: bool
    simulate_devices: str | None
    profile_mini: int | None  # the minibatch --simulate and --auto-place profile
    auto_place: int | None
    auto_place_out: Path | None
    check_grads: bool
    # using a trained net (convnet.app.using)
    predict: tuple[Path, ...] | None
    top: int
    predict_out: Path | None
    show_filters: str | None
    show_preds: int | None
    out: Path | None
    export_onnx: Path | None
    # --init-from: the checkpoint file a new run takes the layers that fit from
    init_from: Path | None
    # --load-file, read
    resume: Resume | None
    #: how the logical devices were placed on the GPUs without --gpu (for the banner)
    gpu_note: str | None = None


#: Resumable options that only some data providers read: a saved value is dropped
#: when the resumed run reads other data (it was the saved run's, not the user's).
PROVIDER_OPTIONS = {"data_path": ("cifar", "convnet-batches", "image"), "dummy_cases": ("dummy",)}

#: Built-in values of resumable options.  epochs, gpu and data_provider depend on
#: other options and are filled in by :func:`resolve_options`.
DEFAULTS = {"mini": 128, "micro_batches": 1, "pipeline_schedule": DEFAULT_SCHEDULE, "seed": 0,
            "backend": "auto", "inner_size": 0, "image_size": 256, "color_noise": 0.0,
            "sync": "sync", "precision": "fp32"}


def resolve_options(args: argparse.Namespace,
                    config: tuple[Path, Path] | None = None) -> RunOptions:
    """The options of the parsed command line ``args``, completed and checked.

    ``config``, a (layer-def, layer-params) pair, stands in for the command
    line's config files (``--compare`` names several).
    """
    values = {f.name: getattr(args, f.name) for f in fields(RunOptions)
              if f.name not in ("resume", "gpu_note")}
    if values["predict"] is not None:
        values["predict"] = tuple(values["predict"])
    if values["init_from"] is not None:
        values["init_from"] = init_from_checkpoint(values["init_from"], args.load_file)
    if isinstance(values["sync"], list):  # --sync takes several modes for --compare
        if len(values["sync"]) > 1:
            raise UsageError(f"--sync takes one mode, not {len(values['sync'])} (several, e.g. "
                             "--sync sync local:4, only with --compare)")
        values["sync"] = values["sync"][0]
    if config is not None:
        values["layer_def"], values["layer_params"] = map(Path, config)
    resume = read_resume(args.load_file) if args.load_file is not None else None
    if resume is not None and values["save_path"] is None:
        # Save next to the checkpoint loaded, not where it was first saved: a copied
        # run folder must not write into the folder it was copied from.
        values["save_path"] = resume.checkpoint.parent
    saved_data_path = False  # the data folder is the checkpoint's, not one given here
    if resume is not None:
        for key, value in resume.saved_options.items():
            if values[key] is None:
                values[key] = value
                saved_data_path = saved_data_path or key == "data_path"
                if key in ("layer_def", "layer_params"):
                    check_saved_config_file(resume.checkpoint, key, value)
    bundled = values["layer_def"] is None
    if bundled:
        values["layer_def"] = bundled_example.LAYER_DEF
        values["layer_params"] = values["layer_params"] or bundled_example.LAYER_PARAMS
    elif values["layer_params"] is None:
        raise UsageError("--layer-def needs --layer-params (the learning-rate file)")
    for key, value in DEFAULTS.items():
        if values[key] is None:
            values[key] = value
    given = values["gpu"] is not None  # on the command line or in the checkpoint
    if not given:
        values["gpu"] = _default_gpus(values, bundled)
    elif values["auto_place"] is not None and len(values["gpu"]) > values["auto_place"]:
        values["gpu"] = values["gpu"][:values["auto_place"]]  # the first N of a longer list
    # on CUDA, --gpu names physical GPUs: checked here, before anything touches a GPU
    values["gpu"], gpu_note = gpus_for_backend(values["gpu"], given, values["backend"])
    if values["data_provider"] is None:
        if values["data_path"] is not None:
            raise UsageError("--data-path needs --data-provider (cifar, convnet-batches or "
                             "image)")
        values["data_provider"] = "dummy" if values["data_dims"] else "digits"
    if values["epochs"] is None:
        values["epochs"] = bundled_example.EPOCHS if bundled else 1
    if resume is not None:  # a saved option of another data provider does not apply here
        for key, providers in PROVIDER_OPTIONS.items():
            if values["data_provider"] not in providers and values[key] is not None \
                    and resume.saved_options.get(key) == values[key]:
                values[key] = None
    unread = args.image_size and image_size_unread(values["data_provider"], values["data_path"])
    if unread:
        raise UsageError(f"--image-size sizes the photos of class folders: {unread}")
    if saved_data_path and values["data_path"] is not None \
            and not values["data_path"].exists():  # moved since: a path the user never gave
        raise DataError(f"{resume.checkpoint}: the run's --data-path {values['data_path']} "
                        "does not exist; give --data-path where the data are now")
    opts = RunOptions(**values, resume=resume, gpu_note=gpu_note)
    check_options(opts)
    return opts


def init_from_checkpoint(path: Path, load_file: Path | None) -> Path:
    """The checkpoint file ``--init-from`` names, opened once to know it is one (a file
    of another kind is refused here, in one line, before any work)."""
    if load_file is not None:
        raise UsageError("--init-from starts a new run from another run's weights and "
                         "--load-file continues a saved run; give one of them")
    checkpoint = find_checkpoint(path, "--init-from")
    CheckpointReader(checkpoint).close()
    return checkpoint


def _default_gpus(values: dict, bundled: bool) -> tuple[int, ...]:
    """The devices without --gpu: 0..N-1 for --auto-place N; the bundled example's; in
    one process, 0..k-1 for a config whose gpu= lines name k devices (as --compare
    does); under mpiexec, device 0 of each rank."""
    if values["auto_place"] is not None:
        return tuple(range(values["auto_place"]))
    if bundled:
        return bundled_example.GPU
    if launch.process_count() > 1:
        return (0,)
    with warnings.catch_warnings():  # the run's own reading of the files warns once
        warnings.simplefilter("ignore")
        net = parse_net(values["layer_def"], values["layer_params"])
    named = 1 + max((g for ldef in net for g in (ldef.gpu or ())), default=0)
    return tuple(range(min(named, MAX_DEVICES)))


def tools_asked(opts: RunOptions) -> list[str]:
    """The options given that ask for something other than training, each of which the
    run does instead of training (``--print-plan``, ``--test-only``, ``--predict``, ...;
    ``--plan-graph`` without ``--print-plan`` plans as ``--print-plan`` does)."""
    return [name for name, on in (("--print-plan", opts.print_plan),
                                  ("--plan-graph", opts.plan_graph is not None
                                   and not opts.print_plan),
                                  ("--check-grads", opts.check_grads),
                                  ("--test-only", opts.test_only),
                                  ("--auto-place", opts.auto_place),
                                  ("--predict", opts.predict),
                                  ("--show-filters", opts.show_filters),
                                  ("--show-preds", opts.show_preds),
                                  ("--export-onnx", opts.export_onnx)) if on]


def check_options(opts: RunOptions) -> None:
    """Refuse options that do not go together (exit 2), before any work is done."""
    tools = tools_asked(opts)
    if len(tools) > 1:
        raise UsageError(f"{' and '.join(tools)} cannot be combined; give one of them")
    if tools and tools[0] not in ("--print-plan", "--plan-graph") and opts.init_from is not None:
        raise UsageError(f"--init-from starts a training run; {tools[0]} uses a saved net "
                         "as it is: give --load-file CHECKPOINT instead")
    check_using_options(opts)
    for option, on in (("--simulate", opts.simulate), ("--auto-place", opts.auto_place)):
        if on:  # the profile runs in this process: refused before anything is planned
            launch.require_one_process(option)
    check_auto_place(opts)
    if opts.test_only and opts.resume is None:
        raise UsageError("--test-only evaluates a saved net: give --load-file CHECKPOINT too")
    if opts.feature_path is not None and not opts.write_features:
        raise UsageError("--feature-path is the folder for --write-features LAYER; give "
                         "--write-features too")
    if opts.tensorboard is not None:
        require_tensorboard("--tensorboard")
        if opts.tensorboard.exists() and not opts.tensorboard.is_dir():
            raise UsageError(f"--tensorboard: {opts.tensorboard} is not a folder")
        reason = cannot_write_folder(opts.tensorboard)
        if reason is not None:
            raise ConvnetError(f"--tensorboard: cannot make event files in "
                               f"{opts.tensorboard}: {reason}")
    if opts.multiview_test and not opts.inner_size:
        raise UsageError("--multiview-test tests on crops: give --inner-size too (e.g. the "
                         "image size for centre and mirror views)")
    if opts.plan_graph is not None:
        refuse_an_input("--plan-graph", opts.plan_graph, opts)
        check_output_file("--plan-graph", opts.plan_graph, opts.overwrite,
                          keep="give another --plan-graph PNG")
    if opts.simulate and not opts.print_plan:
        raise UsageError("--simulate predicts the step of the printed plan: give --print-plan "
                         "too")
    if opts.simulate_devices is not None and not (opts.simulate or opts.auto_place):
        raise UsageError("--simulate-devices chooses what --simulate or --auto-place "
                         "predicts for: give --simulate (with --print-plan) or --auto-place N")
    if opts.simulate_devices is not None:
        device_kind(opts.simulate_devices)
    if opts.profile_mini is not None and not (opts.simulate or opts.auto_place):
        raise UsageError("--profile-mini sets the minibatch --simulate or --auto-place "
                         "profiles: give --simulate (with --print-plan) or --auto-place N")
    if opts.profile_mini is not None and opts.profile_mini > opts.mini:
        raise UsageError(f"--profile-mini {opts.profile_mini} is larger than --mini "
                         f"{opts.mini}: the profile is extrapolated up to --mini, give "
                         f"--profile-mini {opts.mini} or less")
    if opts.profile_mini == 1 and opts.mini > 1:
        raise UsageError(f"--profile-mini 1 profiles one size only (1 case and its half, 1), "
                         f"and the step at --mini {opts.mini} is extrapolated from a line "
                         f"through two sizes: give --profile-mini 2 or more")
    needs_data = not ((opts.print_plan or opts.check_grads) and opts.data_dims
                      and not opts.simulate)  # --simulate profiles on the data
    if opts.data_provider in PROVIDER_OPTIONS["data_path"] and opts.data_path is None \
            and needs_data:
        raise UsageError(f"the '{opts.data_provider}' data provider needs --data-path DIR")
    if opts.dummy_cases is not None and opts.data_provider != "dummy":
        raise UsageError(f"--dummy-cases sets the size of dummy batches; the "
                         f"'{opts.data_provider}' data has its own")
    if opts.micro_batches > 1 and opts.sync.startswith("async:"):
        raise UsageError(f"--micro-batches {opts.micro_batches} pipelines lockstep steps, and "
                         f"--sync {opts.sync} takes the replicas' updates out of step; give "
                         "--sync sync or local:K, or --micro-batches 1")
    if opts.precision == "fp16" and opts.sync != "sync":
        raise UsageError(f"--precision fp16 skips the steps whose gradients overflow, which "
                         f"replicas that update apart (--sync {opts.sync}) cannot agree on: "
                         "give --sync sync, or --precision bf16 (no loss scaling)")
    if opts.profile and opts.sync.startswith("async:"):
        raise UsageError(f"--profile times the operations of lockstep steps; under --sync "
                         f"{opts.sync} a data-parallel net has none, and a hybrid net's would "
                         "leave out the increments moving beside them: give --sync sync or "
                         "local:K to profile")
    processes = launch.process_count()
    if opts.slow_device is not None and (opts.slow_device[0] or 0) >= len(opts.gpu) * processes:
        each = f" for each of {processes} processes" if processes > 1 else ""
        raise UsageError(f"--slow-device {slow_device_text(opts.slow_device)}: --gpu lists "
                         f"{len(opts.gpu)} device(s){each}, numbered from 0")
    if opts.data_provider in ("digits", "dummy") and opts.data_path is not None:
        raise UsageError(f"the '{opts.data_provider}' data provider reads no files; "
                         "--data-path is for cifar, convnet-batches and image")
    if opts.skip_bad_images and opts.data_provider != "image":
        raise UsageError(f"--skip-bad-images leaves out JPEGs that cannot be decoded; the "
                         f"'{opts.data_provider}' data holds no JPEGs (it is for --data-provider "
                         "image)")


def check_using_options(opts: RunOptions) -> None:
    """--predict, --show-filters, --show-preds and --export-onnx use a saved net: each
    needs --load-file, and the files they write follow the --overwrite rule."""
    used = [name for name, on in (("--predict", opts.predict),
                                  ("--show-filters", opts.show_filters),
                                  ("--show-preds", opts.show_preds),
                                  ("--export-onnx", opts.export_onnx)) if on]
    if used and opts.resume is None:
        raise UsageError(f"{used[0]} uses a trained net: give --load-file CHECKPOINT too")
    if opts.predict_out is not None and not opts.predict:
        raise UsageError("--predict-out is the CSV file of --predict: give --predict IMAGE too")
    drawing = opts.show_filters is not None or opts.show_preds is not None
    if opts.out is not None and not drawing:
        raise UsageError("--out names the picture of --show-filters or --show-preds: give "
                         "one of them too")
    if drawing and opts.out is None:
        raise UsageError(f"{used[0]} draws a picture: give --out FILE.png")
    for option, path in (("--predict-out", opts.predict_out), ("--out", opts.out),
                         ("--export-onnx", opts.export_onnx)):
        if path is not None:
            refuse_an_input(option, path, opts)
            check_output_file(option, path, opts.overwrite)


def refuse_an_input(option: str, path: Path, opts: RunOptions) -> None:
    """A file ``option`` writes is never one the run reads (its config files or the
    checkpoint it loads), ``--overwrite`` or not: that option replaces what earlier
    runs wrote, and a mistyped name would otherwise destroy the net or its config."""
    inputs = (("--layer-def", opts.layer_def), ("--layer-params", opts.layer_params),
              ("--load-file checkpoint", opts.resume and opts.resume.checkpoint),
              ("--init-from checkpoint", opts.init_from))
    target = Path(path).resolve()
    for name, source in inputs:
        if source is not None and Path(source).resolve() == target:
            raise UsageError(f"{option} {path} is the {name} this run reads: give another "
                             "file")


def check_output_file(option: str, path: Path, overwrite: bool, keep: str | None = None,
                      replace: str = "add --overwrite") -> None:
    """A file ``option`` writes: a file name in a folder that exists, and one already
    there only replaced with ``--overwrite`` (``keep`` and ``replace``: how to keep or
    replace it, when not the command line's options)."""
    if path.is_dir():
        raise UsageError(f"{option}: {path} is a folder; give a file name")
    if not path.parent.is_dir():
        raise UsageError(f"{option}: the folder {path.parent} does not exist")
    refuse_existing(path, overwrite, keep=keep or f"give another {option} FILE",
                    replace=replace)


def auto_place_output(opts: RunOptions) -> Path:
    """The file --auto-place writes: --auto-place-out, else LAYER_DEF's name with
    -auto-N.cfg in the current folder (never beside the original, which may be read-only)."""
    return opts.auto_place_out or Path(f"{opts.layer_def.stem}-auto-{opts.auto_place}.cfg")


def check_auto_place(opts: RunOptions) -> None:
    """--auto-place N places the net on the N devices of --gpu and writes a new file;
    an existing one is kept unless --overwrite says otherwise."""
    if opts.auto_place_out is not None and opts.auto_place is None:
        raise UsageError("--auto-place-out names the file --auto-place writes: give "
                         "--auto-place N too")
    if opts.auto_place is None:
        return
    if opts.auto_place > len(opts.gpu):
        raise UsageError(f"--auto-place {opts.auto_place} places the net on {opts.auto_place} "
                         f"devices but --gpu lists {len(opts.gpu)}; give --gpu with at least "
                         f"{opts.auto_place} devices (the first {opts.auto_place} are used), "
                         f"or leave --gpu out for {','.join(map(str, range(opts.auto_place)))}")
    out = auto_place_output(opts)
    refuse_an_input("--auto-place-out", out, opts)
    check_output_file("--auto-place-out", out, opts.overwrite)
