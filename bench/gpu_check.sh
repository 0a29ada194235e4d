#!/usr/bin/env bash
# The CUDA backend on a machine with an NVIDIA GPU: one call of at most 6 minutes that
# gives every figure the GPU work needs, then a one-screen summary (and summary.json).
#
#   environment  versions (GPU, driver, CUDA, NVRTC, NCCL, CuPy, PyTorch) and the
#                self-test of the fused kernels on every GPU (the first run on a
#                machine compiles the kernels; CuPy caches them for the later stages)
#   example      the bundled example on --backend cuda without --gpu (round robin)
#   cifar10      200 training steps of the CIFAR-10 reference net on dummy data
#   tests        the GPU tests (tests/cuda/test_gpu.py first), JUnit XML
#   bench        bench/bench_cuda.py: engine vs PyTorch images/s on the same GPU
#   memory       bench/cuda_memory.py: what CuPy's pool holds against the estimate
#   data         bench/cuda_data_wait.py: the data-wait share of a --data-provider
#                image run on JPEG batches it writes
#
# Usage: bench/gpu_check.sh [LOG_DIR] [STAGE ...]   (make gpu-check; default: all stages)
# PYTHON (default python3) must import the package; on a GPU image that has CuPy,
# PyTorch and pytest: pip install --no-deps --no-build-isolation --no-index -e .
# Every stage runs under `timeout` (SIGINT first, so pytest still writes its report,
# then SIGKILL 5 s later) within its own limit (LIMIT_<stage> seconds overrides it)
# and within what is left of GPU_CHECK_BUDGET (default 360 s) for the whole call; a
# stage that fails or runs out of time does not stop the later ones.  Without a GPU
# the stages that need one are skipped with the reason.
# Exit status: 0 when every stage that ran passed, 1 when one failed or timed out,
# 2 when no GPU was usable, 3 when the package does not import.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOG=${1:-gpu-check-logs}
shift || true
ALL="environment example cifar10 tests bench memory data"
STAGES=${*:-$ALL}
for stage in $STAGES; do
    case " $ALL " in
    *" $stage "*) ;;
    *) echo "gpu_check: unknown stage '$stage' ($ALL)" >&2; exit 2 ;;
    esac
done
mkdir -p "$LOG"
: >"$LOG/stages.tsv"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
BUDGET=${GPU_CHECK_BUDGET:-360}
RESERVE=10  # seconds kept for the summary
KILL_AFTER=5
started=$SECONDS

declare -A LIMIT=([environment]=60 [example]=25 [cifar10]=35 [tests]=100 [bench]=50
                  [memory]=30 [data]=45)

record() {  # stage status exit seconds limit note
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$LOG/stages.tsv"
}

run_stage() {  # name command...: run it within its limit and what is left of the budget
    local name=$1
    shift
    local limit=${LIMIT[$name]}
    local override="LIMIT_$name"
    [ -n "${!override:-}" ] && limit=${!override}
    local left=$((BUDGET - RESERVE - KILL_AFTER - (SECONDS - started)))
    if [ "$left" -lt 5 ]; then
        echo "=== $name: skipped, the ${BUDGET} s budget is spent"
        record "$name" skipped "" 0 "$limit" "the ${BUDGET} s budget was spent"
        return
    fi
    [ "$left" -lt "$limit" ] && limit=$left
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

# Preconditions: the package imports; is a GPU usable?
if ! "$PY" -c "import convnet.kernels.cuda" 2>"$LOG/import.err"; then
    echo "gpu_check: $PY cannot import the package (pip install --no-deps" \
         "--no-build-isolation --no-index -e . on a GPU image): $(tail -n 1 "$LOG/import.err")" >&2
    exit 3
fi
NO_GPU=$("$PY" -W ignore -c "from convnet.kernels import cuda; print(cuda.unavailable_reason())" \
         2>/dev/null) || NO_GPU="the CUDA backend's availability check failed"

REF=examples/cuda-convnet2
for stage in $STAGES; do
    if [ -n "$NO_GPU" ] && [ "$stage" != environment ] && [ "$stage" != tests ]; then
        skip_stage "$stage" "no GPU: $NO_GPU"
        continue
    fi
    case $stage in
    environment)
        run_stage environment "$PY" -m convnet.kernels.cuda.environment --json "$LOG/environment.json" ;;
    example)
        run_stage example "$PY" convnet.py --backend cuda --epochs 3 --no-progress ;;
    cifar10)
        run_stage cifar10 "$PY" convnet.py --layer-def $REF/layers-cifar10-11pct.cfg \
            --layer-params $REF/layer-params-cifar10-11pct.cfg --data-provider dummy \
            --data-dims 3x32x32 --num-classes 10 --dummy-cases 1280 --train-range 1-20 \
            --test-range 21 --mini 128 --gpu 0 --backend cuda --epochs 1 --no-progress ;;
    tests)
        run_stage tests "$PY" -m pytest -p no:cacheprovider -o addopts= -q -rfE \
            -o faulthandler_timeout=60 --durations=10 --junitxml="$LOG/tests.xml" \
            tests/cuda/test_gpu.py tests/cuda/test_async.py tests/runtime/devices/test_collectives.py \
            tests/cuda/test_device.py tests/cuda/test_gpu_ids.py tests/cuda/test_cuda_failures.py ;;
    bench)
        run_stage bench "$PY" bench/bench_cuda.py --steps 10 --warmup 2 --json "$LOG/bench.json" ;;
    memory)
        run_stage memory "$PY" bench/cuda_memory.py --json "$LOG/memory.json" ;;
    data)
        run_stage data "$PY" bench/cuda_data_wait.py --json "$LOG/data.json" ;;
    esac
done

echo
"$PY" bench/gpu_check_summary.py "$LOG" --no-gpu "$NO_GPU" --seconds $((SECONDS - started))
status=$?
echo "(logs and summary.json in $LOG/)"
exit $status
