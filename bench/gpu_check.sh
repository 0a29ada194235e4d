#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU: one call of at most 6 minutes that
# gives every figure the GPU work needs, most important first, then a one-screen
# summary (and summary.json with every figure).  The stages, in the order they run:
#
#   environment  versions (GPU, driver, CUDA, NVRTC, NCCL, CuPy, PyTorch) and the
#                self-test of the fused kernels on every GPU (the first run on a
#                machine compiles the kernels; CuPy caches them for the later stages)
#   tests        the GPU tests (tests/cuda/test_gpu.py first), JUnit XML
#   proofs       tests/cuda/test_gpu_speed.py, what must hold before the speed switches
#                become defaults: one host wait per step, cuDNN against the im2col
#                kernels, captured steps bitwise eager ones, every --precision; JUnit XML
#   example      the bundled example on --backend cuda without --gpu (round robin)
#   cifar10      200 training steps of the CIFAR-10 reference net on dummy data
#   memory       bench/cuda_memory.py: what CuPy's pool holds against the estimate
#   bench        bench/bench_cuda.py --switches: the reference nets and ResNet-50, the
#                engine against PyTorch in each precision, memory against PyTorch's,
#                the hybrid on one GPU.  It
#                takes the time the later stages do not need (at least its own limit),
#                and its --budget leaves out, and records, the columns that time
#                cannot cover (bench/cuda_columns.py: what matters most first)
#   data         bench/cuda_data_wait.py: the data-wait share of a --data-provider
#                image run on JPEG batches it writes
#
# Usage: bench/gpu_check.sh [LOG_DIR] [STAGE ...]   (make gpu-check; default: all stages)
# Stages always run in the order above.  Naming some reruns them: their earlier results
# in LOG_DIR are replaced and the other stages' kept, so the summary covers them all.
# PYTHON (default python3) must have CuPy, PyTorch and pytest (a GPU image's python);
# where it cannot import the package, the script installs this tree into it with
# pip install --no-deps --no-build-isolation --no-index -e . (nothing downloaded).
# Every stage runs under `timeout` (SIGINT first, so pytest still writes its report,
# then SIGKILL 5 s later) within its own limit (LIMIT_<stage> seconds overrides it)
# and within what is left of GPU_CHECK_BUDGET (default 360 s; 540 gives the bench more
# columns) for the whole call; a
# stage that fails or runs out of time does not stop the later ones.  Without a GPU
# the stages that need one are skipped with the reason.
# Exit status: 0 when every stage that ran passed, 1 when one failed or timed out,
# 2 when no GPU was usable, 3 when the package does not import.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=${1:-gpu-check-logs}
shift || true
ALL="environment tests proofs example cifar10 memory bench data"
STAGES=${*:-$ALL}
for stage in $STAGES; do
    case " $ALL " in
    *" $stage "*) ;;
    *) echo "gpu_check: unknown stage '$stage' ($ALL)" >&2; exit 2 ;;
    esac
done
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
BUDGET=${GPU_CHECK_BUDGET:-360}
RESERVE=10     # seconds kept for the summary
KILL_AFTER=5   # seconds between timeout's SIGINT and its SIGKILL
SHORTEST=5     # a stage given less than this (or than its own limit) is skipped
BENCH_MARGIN=20  # the bench's --budget is its limit less this (one column's overrun)
started=$SECONDS

# Each stage's limit: about twice what it is expected to take on a fresh machine, where
# CuPy compiles every kernel on first use; the bench's is its least (it takes what the
# data stage does not need).  They add up to more than the budget: when stages run long,
# the last ones get what is left, or are skipped.
declare -A LIMIT=([environment]=90 [tests]=150 [proofs]=100 [example]=30 [cifar10]=40
                  [memory]=40 [bench]=60 [data]=50)
for stage in $ALL; do
    override="LIMIT_$stage"
    [ -n "${!override:-}" ] && LIMIT[$stage]=${!override}
done
selected() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }

# Earlier results of the stages that run now are forgotten; the others' are kept.
mkdir -p "$LOG"
touch "$LOG/stages.tsv"
for stage in $STAGES; do
    rm -f "$LOG/$stage.log" "$LOG/$stage.json" "$LOG/$stage.xml"
done
awk -F'\t' -v run=" $STAGES " 'index(run, " " $1 " ") == 0' "$LOG/stages.tsv" \
    >"$LOG/stages.tsv.new" && mv "$LOG/stages.tsv.new" "$LOG/stages.tsv"

record() {  # stage status exit seconds limit note
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$LOG/stages.tsv"
}

later_need() {  # seconds the selected stages after $1 may take, with their kill grace
    local need=0 after=0 stage
    for stage in $ALL; do
        [ "$after" = 1 ] && selected "$stage" && need=$((need + LIMIT[$stage] + KILL_AFTER))
        [ "$stage" = "$1" ] && after=1
    done
    echo "$need"
}

limit_for() {  # the seconds stage $1 may run now: its limit within what is left
    local left=$((BUDGET - RESERVE - KILL_AFTER - (SECONDS - started)))
    local limit=${LIMIT[$1]}
    if [ "$1" = bench ]; then  # what the later stages leave, at least its own limit
        local spare=$((left - $(later_need bench)))
        [ "$spare" -gt "$limit" ] && limit=$spare
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    echo "$limit"
}

run_stage() {  # name limit command...: run it within limit seconds
    local name=$1 limit=$2
    shift 2
    echo "=== $name (at most ${limit} s): $*"
    local begun=$SECONDS
    timeout --signal=INT --kill-after=$KILL_AFTER "$limit" "$@" >"$LOG/$name.log" 2>&1
    local rc=$?
    local took=$((SECONDS - begun))
    tail -n 5 "$LOG/$name.log" | sed 's/^/    /'
    local status=passed
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then  # timeout's own codes: out of time
        status=timeout
    elif [ "$rc" -ne 0 ]; then
        status=failed
    fi
    echo "=== $name: $status (exit $rc after $took s)"
    record "$name" "$status" "$rc" "$took" "$limit" ""
}

skip_stage() {  # name reason
    echo "=== $1: skipped: $2"
    record "$1" skipped "" 0 "${LIMIT[$1]}" "$2"
}

# Preconditions: the package imports (installed alone from this tree if it does not:
# no dependencies, nothing downloaded); is a GPU usable?
INSTALL=("$PY" -m pip install --no-deps --no-build-isolation --no-index -e .)
if ! "$PY" -c "import convnet.kernels.cuda" 2>/dev/null; then
    echo "=== install: $PY cannot import the package: ${INSTALL[*]}"
    "${INSTALL[@]}" >"$LOG/install.log" 2>&1 || tail -n 3 "$LOG/install.log" | sed 's/^/    /'
fi
if ! "$PY" -c "import convnet.kernels.cuda" 2>"$LOG/import.err"; then
    echo "gpu_check: $PY cannot import the package, and ${INSTALL[*]} did not help:" \
         "$(tail -n 1 "$LOG/import.err")" >&2
    exit 3
fi
NO_GPU=$("$PY" -W ignore -c "from convnet.kernels import cuda; print(cuda.unavailable_reason())" \
         2>/dev/null) || NO_GPU="the CUDA backend's availability check failed"

REF=examples/cuda-convnet2
PYTEST=("$PY" -m pytest -p no:cacheprovider -o addopts= -q -rfE -o faulthandler_timeout=60
        --durations=10)
for stage in $ALL; do
    selected "$stage" || continue
    if [ -n "$NO_GPU" ] && [ "$stage" != environment ] && [ "$stage" != tests ] \
        && [ "$stage" != proofs ]; then
        skip_stage "$stage" "no GPU: $NO_GPU"
        continue
    fi
    limit=$(limit_for "$stage")
    shortest=$((LIMIT[$stage] < SHORTEST ? LIMIT[$stage] : SHORTEST))
    if [ "$limit" -lt "$shortest" ]; then
        skip_stage "$stage" "the ${BUDGET} s budget was spent"
        continue
    fi
    case $stage in
    environment)
        run_stage environment "$limit" "$PY" -m convnet.kernels.cuda.environment \
            --json "$LOG/environment.json" ;;
    tests)
        run_stage tests "$limit" "${PYTEST[@]}" --junitxml="$LOG/tests.xml" \
            tests/cuda/test_gpu.py tests/cuda/test_async.py tests/runtime/devices/test_collectives.py \
            tests/cuda/test_device.py tests/cuda/test_gpu_ids.py tests/cuda/test_cuda_failures.py ;;
    proofs)
        run_stage proofs "$limit" "${PYTEST[@]}" --junitxml="$LOG/proofs.xml" \
            tests/cuda/test_gpu_speed.py ;;
    example)
        run_stage example "$limit" "$PY" convnet.py --backend cuda --epochs 3 --no-progress ;;
    cifar10)
        run_stage cifar10 "$limit" "$PY" convnet.py --layer-def $REF/layers-cifar10-11pct.cfg \
            --layer-params $REF/layer-params-cifar10-11pct.cfg --data-provider dummy \
            --data-dims 3x32x32 --num-classes 10 --dummy-cases 1280 --train-range 1-20 \
            --test-range 21 --mini 128 --gpu 0 --backend cuda --epochs 1 --no-progress ;;
    memory)
        run_stage memory "$limit" "$PY" bench/cuda_memory.py --json "$LOG/memory.json" ;;
    bench)
        budget=$((limit > 2 * BENCH_MARGIN ? limit - BENCH_MARGIN : limit / 2))
        run_stage bench "$limit" "$PY" bench/bench_cuda.py --nets cifar10,alexnet,resnet50 \
            --switches --budget "$budget" \
            --json "$LOG/bench.json" ;;
    data)
        run_stage data "$limit" "$PY" bench/cuda_data_wait.py --json "$LOG/data.json" ;;
    esac
done

# stages.tsv in the order of the stages, whichever call ran each
for stage in $ALL; do
    awk -F'\t' -v s="$stage" '$1 == s' "$LOG/stages.tsv"
done >"$LOG/stages.tsv.new" && mv "$LOG/stages.tsv.new" "$LOG/stages.tsv"

echo
"$PY" bench/gpu_check_summary.py "$LOG" --no-gpu "$NO_GPU" --seconds $((SECONDS - started)) \
    --budget "$BUDGET"
status=$?
echo "(logs and summary.json in $LOG/)"
exit $status
