#!/usr/bin/env bash
# The GPU checks (issues 7 and 11) on one machine with a CUDA GPU, in as few calls as they need.
#
# Stages (docs/gpu.md has the plan and the time each takes):
#   bash scripts/gpu.sh prepare        # on the development machine, no GPU: fetch the cp312 wheels the GPU
#                                      # machine lacks (PySDD, klaycircuits) and copy ../shared/bench/circuits,
#                                      # all into .carry/ (ignored by git; carry it to the GPU machine)
#   bash scripts/gpu.sh tests          # the CUDA tests (tests/psl/test_psl_engines.py, test_circuit_compile.py, test_cuda_decoding.py, test_causal_lm_memory.py)
#   bash scripts/gpu.sh psl            # benchmarks/psl.py --case sudoku: the RNN + PSL step at batch 64, precision
#   bash scripts/gpu.sh circuits [B..] # benchmarks/circuits.py --compile at batch 128 and 4096 (or the B given)
#   bash scripts/gpu.sh checks         # tests, psl and circuits
#   bash scripts/gpu.sh table1         # start Sudoku Table 1 (paper preset, 15 runs) in the background,
#                                      # resuming its checkpoints if there are any, else those of the archive
#                                      # carried in (.carry/table1/); returns at once
#   bash scripts/gpu.sh wait [SECONDS] # follow Table 1 until it ends or SECONDS pass (default 480), copy its
#                                      # table, results and curves to the log folder, pack its run folder
#                                      # into parts of 16 MB and put the first ones in $OUT/table1-archive
#   bash scripts/gpu.sh fetch [K]      # put parts K, K+1, ... of the last pack in $OUT/table1-archive (as many
#                                      # as a call sends back: 8 files, 64 MiB)
#   bash scripts/gpu.sh keep DIR...    # on the development machine: the parts brought back (DIR = the device
#                                      # tool's files_at) into .carry/table1/; says what to carry next
# Several stages run in order: `bash scripts/gpu.sh tests psl table1 wait 300`.
#
# Logs and results go to $OUT (the device tool's folder), else to gpu-logs/.  The machine needs Python
# with the CUDA build of torch, transformers and accelerate; pseudosl runs from src/ (no install).
# PSEUDOSL_GPU_DRY=1 is a dry run of the plumbing on any machine: the CPU, tiny benchmarks, the quick preset.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
logs=${OUT:-$root/gpu-logs}
mkdir -p "$logs"
carry=$root/.carry
if [ "${PSEUDOSL_GPU_DRY:-0}" = 1 ]; then
    device=cpu preset=quick psl_args=(--quick --sudoku-batch 2) circuit_args=(--reps 3 --only sudoku_4) batches=(16)
else
    device=cuda preset=paper psl_args=() circuit_args=() batches=(128 4096)
fi
table_out=$root/runs/gpu-table1-$preset
archive_name=gpu-table1-$preset
packed=$root/runs/gpu-table1-archive   # the last pack, on the GPU machine
kept=$carry/table1                     # the parts kept on the development machine and carried in
per_call=3                             # parts of 16 MB carried in per device call (64 MiB with the checkout)
py=${PYTHON:-python3}

ready=0
setup() {  # once per command: the carried wheels into /tmp/pseudosl-site (not in a dry run), and src/ on the path
    [ "$ready" = 1 ] && return
    ready=1
    if [ "$device" = cuda ] && compgen -G "$carry/wheels/*.whl" >/dev/null; then
        "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/pseudosl-site \
            "$carry"/wheels/*.whl
        export PYTHONPATH=/tmp/pseudosl-site:$root/src${PYTHONPATH:+:$PYTHONPATH}
    else
        export PYTHONPATH=$root/src${PYTHONPATH:+:$PYTHONPATH}
    fi
    export PYTHONUNBUFFERED=1 PSEUDOSL_CACHE=${PSEUDOSL_CACHE:-$root/.cache}
}

prepare() {
    mkdir -p "$carry/wheels" "$carry/circuits"
    "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d "$carry/wheels" pysdd==1.0.6 klaycircuits==0.1.2
    cp "$root"/../shared/bench/circuits/*.{sdd,vtree,cnf} "$carry/circuits/" 2>/dev/null || \
        echo "no ../shared/bench/circuits: the circuit benchmark will run on the experiments' circuits only"
    du -sh "$carry"
}

tests() {
    setup
    { nvidia-smi || true; "$py" -c "import sys, torch; print(sys.version); print('torch', torch.__version__, 'cuda',
        torch.version.cuda, 'cudnn', torch.backends.cudnn.version(),
        torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')"; } 2>&1 | tee "$logs/tests.log"
    echo "== CUDA tests =="
    "$py" -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/psl/test_psl_engines.py tests/circuit/test_circuit_compile.py tests/generation/test_cuda_decoding.py tests/psl/test_causal_lm_memory.py \
        2>&1 | tee -a "$logs/tests.log" || true
}

bench_psl() {
    setup
    echo "== benchmarks/psl.py: the Sudoku RNN + PSL training step =="
    "$py" benchmarks/psl.py --device "$device" --case sudoku "${psl_args[@]}" 2>&1 | tee "$logs/bench_psl.log" || true
}

bench_circuits() {  # batch sizes as arguments (default: 128 and 4096)
    setup
    local circuits=() sizes=("$@")
    [ ${#sizes[@]} -gt 0 ] || sizes=("${batches[@]}")
    [ -d "$carry/circuits" ] && circuits=(--circuits "$carry/circuits")
    for b in "${sizes[@]}"; do
        echo "== benchmarks/circuits.py --compile, batch $b =="
        "$py" benchmarks/circuits.py --device "$device" --compile --batch "$b" "${circuits[@]}" "${circuit_args[@]}" 2>&1 \
            | tee "$logs/bench_circuits_$b.log" || true
    done
}

archive() { "$py" -m pseudosl.experiments.archive "$@"; }

table1() {
    setup
    local resume=()
    if ! compgen -G "$table_out/*/checkpoint.pt" >/dev/null && [ -f "$kept/$archive_name.json" ]; then
        echo "== unpacking the carried archive $kept/$archive_name.json =="
        archive unpack "$kept/$archive_name.json" "$table_out" --extra-to "$root/runs" || {  # the log goes on
            echo "carry every part listed above in (bash scripts/gpu.sh keep prints the lists), then table1 again" >&2
            return 1; }
    fi
    compgen -G "$table_out/*/checkpoint.pt" >/dev/null && resume=(--resume)
    echo "== Table 1 ($preset preset) -> $table_out ${resume[*]} =="
    mkdir -p "$root/runs"
    date +%s >"$root/runs/gpu-table1.start"
    setsid nohup "$py" -m pseudosl.cli sudoku train --preset "$preset" --out "$table_out" "${resume[@]}" \
        >>"$root/runs/gpu-table1.log" 2>&1 </dev/null &
    echo $! >"$root/runs/gpu-table1.pid"
}

wait_table1() {
    local limit=${1:-480} pid
    pid=$(cat "$root/runs/gpu-table1.pid")
    local t0=$SECONDS
    while kill -0 "$pid" 2>/dev/null && (( SECONDS - t0 < limit )); do sleep 10; done
    local elapsed=$(( $(date +%s) - $(cat "$root/runs/gpu-table1.start") ))
    if kill -0 "$pid" 2>/dev/null; then
        echo "Table 1 still running after ${elapsed}s; run 'wait' again"
    else
        echo "Table 1 finished after ${elapsed}s (wall, from its start)"
    fi
    tr '\r' '\n' <"$root/runs/gpu-table1.log" | grep -E '^\[.*\] (epoch [0-9]+:|resumed)' | tail -n 15 || true
    cp "$root/runs/gpu-table1.log" "$logs/table1.log"
    for f in table.txt results.json curves.png; do
        [ -f "$table_out/$f" ] && cp "$table_out/$f" "$logs/table1_$f"
    done
    [ -f "$table_out/table.txt" ] && cat "$table_out/table.txt"
    if compgen -G "$table_out/*/checkpoint.pt" >/dev/null; then
        echo "== packing $table_out (finished runs keep their selected weights only) =="
        setup
        archive pack "$table_out" "$packed" --name "$archive_name" --extra "$root/runs/gpu-table1.log"
        fetch 0
    fi
    return 0
}

room() {  # parts of 16 MB that still fit in what a device call sends back: 8 files, 64 MiB in all
    local files bytes
    files=$(find "$logs" -type f | wc -l)
    bytes=$(find "$logs" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
    local by_files=$(( 8 - files )) by_bytes=$(( (67108864 - bytes - 1048576) / 16000000 ))
    echo $(( by_files < by_bytes ? by_files : by_bytes ))
}

fetch() {  # parts K.. of the last pack and its manifest into $logs/table1-archive, as many as come back
    local k=${1:-0} manifest=$packed/$archive_name.json
    [ -f "$manifest" ] || { echo "no pack at $manifest: run wait first" >&2; return 1; }
    mkdir -p "$logs/table1-archive"
    cp "$manifest" "$logs/table1-archive/"
    local parts=("$packed/$archive_name".tgz.*) i n
    n=$(room)
    for (( i = k; i < k + n && i < ${#parts[@]}; i++ )); do cp "${parts[$i]}" "$logs/table1-archive/"; done
    if (( k + per_call < ${#parts[@]} )); then
        echo "archive: parts $k..$(( i - 1 )) of ${#parts[@]} in \$OUT/table1-archive; in the next call: bash scripts/gpu.sh fetch $i"
    else
        echo "archive: parts $k..$(( i - 1 )) of ${#parts[@]} in \$OUT/table1-archive (the last)"
    fi
}

keep() {  # on the development machine: parts brought back (files_at folders) into $kept, then what to carry
    setup
    mkdir -p "$kept"
    local dir new
    for dir in "$@"; do
        [ -d "$dir/table1-archive" ] && dir=$dir/table1-archive
        new=$dir/$archive_name.json
        [ -f "$new" ] || { echo "no $archive_name.json in $dir" >&2; return 1; }
        if ! cmp -s "$new" "$kept/$archive_name.json"; then  # a newer pack: its parts replace the older ones
            rm -f "$kept/$archive_name".tgz.* "$kept/$archive_name.json"
            cp "$new" "$kept/"
        fi
        cp "$dir/$archive_name".tgz.* "$kept/" 2>/dev/null || true
    done
    archive status "$kept/$archive_name.json" || true
    local parts=("$kept/$archive_name".tgz.*) i=0 call=1 list
    echo "next GPU slot, the device tool's carry per call (then: bash scripts/gpu.sh table1 wait 480):"
    while (( i < ${#parts[@]} )); do
        list=""
        (( call == 1 )) && list='".carry/wheels", ".carry/circuits", ".carry/table1/'$archive_name'.json", '
        for (( j = i; j < i + per_call && j < ${#parts[@]}; j++ )); do list+="\".carry/table1/$(basename "${parts[$j]}")\", "; done
        echo "  call $call: [${list%, }]"
        i=$j; call=$(( call + 1 ))
    done
}

[ $# -gt 0 ] || { sed -n '2,/^set /p' "$0" | sed '$d'; exit 2; }
while [ $# -gt 0 ]; do
    case $1 in
        prepare) prepare ;;
        tests) tests ;;
        psl) bench_psl ;;
        circuits) sizes=(); while [[ ${2:-} =~ ^[0-9]+$ ]]; do sizes+=("$2"); shift; done; bench_circuits "${sizes[@]}" ;;
        checks) tests; bench_psl; bench_circuits ;;
        table1) table1 ;;
        wait) if [[ ${2:-} =~ ^[0-9]+$ ]]; then wait_table1 "$2"; shift; else wait_table1; fi ;;
        fetch) if [[ ${2:-} =~ ^[0-9]+$ ]]; then fetch "$2"; shift; else fetch; fi ;;
        keep) shift; keep "$@"; exit ;;
        *) echo "unknown stage '$1' (prepare, tests, psl, circuits [BATCH...], checks, table1, wait [SECONDS]," \
                "fetch [K], keep DIR...)" >&2; exit 2 ;;
    esac
    shift
done
