set -x
cd /work/main
export OPC_CACHE_DIR=/tmp/opc-cache-bench
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
uptime
timeout 400 python3 bench/bench_transformer.py --threads 1
uptime
timeout 400 python3 bench/bench_transformer.py --threads 2
uptime
timeout 400 python3 bench/bench_transformer.py --threads 2 --median
uptime
timeout 400 python3 bench/bench_transformer.py --threads 2 --busy
uptime
timeout 500 python3 bench/bench_cpu.py --threads 1 --only conv,lstm,resnet18 --repeat 7
uptime
timeout 500 python3 bench/bench_cpu.py --threads 2 --only conv,lstm,resnet18 --repeat 7
uptime
timeout 500 python3 bench/bench_cpu.py --threads 1 --only gemm-qkv,gemm-fc1,gemm-fc2,gemm-dx,gemm-dw --repeat 7
uptime
timeout 500 python3 bench/bench_cpu.py --threads 2 --only gemm-qkv,gemm-fc1,gemm-fc2,gemm-dx,gemm-dw --repeat 7
uptime
timeout 300 python3 bench/bench_compile.py --sizes 100,1000,5000 --bert tests/models/bert.onnx --repeat 1
uptime
python3 bench/bench_transformer.py --save-onnx /tmp/block.onnx
OPC_NUM_THREADS=1 python3 -m opc profile /tmp/block.onnx --repeat 20
OPC_NUM_THREADS=1 python3 -m opc profile /tmp/block.onnx --repeat 10 --grad
python3 bench/ort_node_times.py /tmp/block.onnx --threads 1 --calls 20
uptime
