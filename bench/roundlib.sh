# Shared by bench/round.sh and the partial rounds' scripts under bench/results/: source it.

run() {  # run FILE COMMAND...: the command, the machine and the load before and after, into FILE
    local file="$1"
    shift
    {
        echo "# $*"
        date
        lscpu | grep "Model name" || true
        uptime
        "$@"
        uptime
    } > "$file" 2>&1
}

cnn_repeats() {  # cnn_repeats PREFIX REPEATS: REPEATS fresh processes of the CNN rows at 1 and 2 threads,
    # as exported and with their BatchNorms folded, into PREFIX-models-cnn[-fold]-repeats.txt
    local out="$1" repeats="$2" fold t
    for fold in "" --fold-bn; do
        [ "$repeats" -gt 0 ] || break
        {
            echo "# for i in 1..$repeats, t in 1 2: python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads t $fold (fresh process each)"
            date
            uptime
            for _ in $(seq "$repeats"); do
                for t in 1 2; do
                    python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t" $fold
                done
            done
            uptime
        } > "$out-models-cnn${fold:+-fold}-repeats.txt" 2>&1
    done
}

cnn_busy() {  # cnn_busy PREFIX [--fold-bn]: the CNN rows at 1 and 2 threads with one CPU-bound process per
    # core beside them (opc chooses its wait policy at import), into PREFIX-models-cnn[-fold]-busy-threadsT.txt
    local out="$1" fold="${2:-}" t hogs=()
    for _ in $(seq "$(nproc)"); do python3 -c "while True: pass" & hogs+=($!); done
    sleep 2
    for t in 1 2; do
        run "$out-models-cnn${fold:+-fold}-busy-threads$t.txt" python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t" $fold
    done
    kill "${hogs[@]}"
}

cnn_partial() {  # cnn_partial PREFIX: the CNN rows as exported and folded at 1 and 2 threads, the CNNs'
    # training steps at 1 thread, the folded CNNs with the machine busy (a CPU-bound process per core),
    # then five more fresh processes of the CNN rows (the medians); each into PREFIX-NAME.txt
    local out="$1" t
    for t in 1 2; do
        run "$out-models-cnn-threads$t.txt" python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t"
        run "$out-models-cnn-fold-threads$t.txt" python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t" --fold-bn
    done
    run "$out-train-threads1.txt" python3 bench/bench_models_cpu.py --train small_cnn mobilenet_v2 resnet18 --calls 10 --threads 1
    cnn_busy "$out" --fold-bn
    cnn_repeats "$out" 5
}

cnn_imagenet() {  # cnn_imagenet PREFIX: cnn_partial, then ResNet-18 and MobileNetV2 at 224x224 (bench_cpu.py)
    # at 1 and 2 threads, into PREFIX-imagenet-threadsT.txt
    local out="$1" t
    cnn_partial "$out"
    for t in 1 2; do
        run "$out-imagenet-threads$t.txt" python3 bench/bench_cpu.py --threads "$t" --only resnet18,mobilenet_v2
    done
}
