#!/usr/bin/env bash
# The fast path's measurements for one short GPU session, in order of value, each under its own time limit
# (benchmarks/gpu_fast.py's sections; a cut section keeps the rows it finished). Run on the device machine
# from the repository root, with the highspy cp312 wheel carried in .whl/, as calls of under 10 minutes:
#
#   bash benchmarks/gpu_session.sh 1    # env, forwards, decode, hf, lookup, profiles  -> $OUT/gpu_fast.json
#   bash benchmarks/gpu_session.sh 2    # syncs and law, fused forwards, fused steps, the optimal verifier
#   bash benchmarks/gpu_session.sh 3    # feature heads: forwards, decoding steps; AR against HF, like for like
#   bash benchmarks/gpu_session.sh 4    # a head's captured step by kernel; the head's steps fused (B = 1)
#   bash benchmarks/gpu_session.sh 5    # heads and small drafters; the optimal verifier's node and step; kernels
#   bash benchmarks/gpu_session.sh 6    # the trained drafters' shapes (fused head, small): forwards, steps;
#                                       # training a head on the card (benchmarks/gpu_train.py)
#
# Results go to $OUT (default /tmp/gpu_out): gpu_fast.json (part 1), gpu_fast_fused.json, gpu_fast_steps.json,
# gpu_fast_checks.json, optimal_cuda.json (part 2), the profiles profile_{target,draft}_static.json, and
# gpu_fast_heads.json, gpu_fast_head_decode.json, gpu_fast_ar_hf.json (part 3: about 5.5 minutes, at most
# 7.7; each section in one process, so a section cut by its limit keeps the rows it finished), and for part 5
# gpu_fast_heads.json, optimal_cuda.json (written after each block), gpu_fast_verifiers.json (binary:3 under
# each verifier) and gpu_fast_head_kernels.json: at most 9.3 minutes; for part 6 gpu_fast_drafters.json,
# gpu_fast_drafter_decode.json, gpu_fast_drafter_fused.json and gpu_train.json: at most 9.5 minutes.
set -u
cd "$(dirname "$0")/.."
export OUT=${OUT:-/tmp/gpu_out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
export PYTHONPATH=$PWD:/tmp/site
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
case "${1:-1}" in
1)
    timeout 540 python3 benchmarks/gpu_fast.py env forwards decode hf lookup profiles
    ;;
2)
    GPU_FAST_RESULT=gpu_fast_checks.json timeout 60 python3 benchmarks/gpu_fast.py syncs law
    GPU_FAST_RESULT=gpu_fast_fused.json timeout 200 python3 benchmarks/gpu_fast.py env fused_forwards
    GPU_FAST_RESULT=gpu_fast_steps.json timeout 170 python3 benchmarks/gpu_fast.py env fused
    timeout 100 python3 benchmarks/bench_optimal.py --device cuda --batches 1,1024 --inductor 1,1024 \
        --name optimal_cuda --out-dir "$OUT"
    ;;
3)
    GPU_FAST_RESULT=gpu_fast_heads.json timeout 150 python3 benchmarks/gpu_fast.py --one-process env heads
    GPU_FAST_RESULT=gpu_fast_head_decode.json timeout 110 python3 benchmarks/gpu_fast.py --one-process head_decode
    GPU_FAST_RESULT=gpu_fast_ar_hf.json timeout 200 python3 benchmarks/gpu_fast.py --one-process ar_hf
    ;;
4)
    GPU_FAST_RESULT=gpu_fast_head_kernels.json timeout 90 python3 benchmarks/gpu_fast.py --one-process head_kernels
    GPU_FAST_RESULT=gpu_fast_head_fused.json timeout 330 python3 benchmarks/gpu_fast.py --one-process head_fused
    ;;
5)
    GPU_FAST_RESULT=gpu_fast_heads.json timeout 170 python3 benchmarks/gpu_fast.py --one-process env heads
    timeout 170 python3 benchmarks/bench_optimal.py --device cuda --batches 1,1024 --ks 2,4 --wor-ks 2 \
        --inductor 1,1024 --name optimal_cuda --out-dir "$OUT"
    GPU_FAST_RESULT=gpu_fast_verifiers.json timeout 130 python3 benchmarks/gpu_fast.py --one-process verifiers
    GPU_FAST_RESULT=gpu_fast_head_kernels.json timeout 90 python3 benchmarks/gpu_fast.py --one-process head_kernels
    ;;
6)
    GPU_FAST_RESULT=gpu_fast_drafters.json timeout 90 python3 benchmarks/gpu_fast.py --one-process env fused_heads
    GPU_FAST_RESULT=gpu_fast_drafter_decode.json timeout 80 python3 benchmarks/gpu_fast.py --one-process \
        drafter_decode
    GPU_FAST_RESULT=gpu_fast_drafter_fused.json timeout 180 python3 benchmarks/gpu_fast.py --one-process \
        drafter_fused
    timeout 210 python3 benchmarks/gpu_train.py check rate
    ;;
*)
    echo "usage: bash benchmarks/gpu_session.sh 1|2|3|4|5|6" >&2
    exit 2
    ;;
esac
ls -la "$OUT"
