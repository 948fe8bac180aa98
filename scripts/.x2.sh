export NCCL_NVLS_ENABLE=0
cmake -S . -B build-gpu -G Ninja -DTESSERA_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null 2>&1
cmake --build build-gpu -j32 --target tessera_cli gpu_worker gpu_bench 2>&1 | grep -E "error|FAILED" | head
B=build-gpu/bench/gpu/gpu_bench; W=build-gpu/tests/gpu/gpu_worker; T=build-gpu/tessera
echo "== check: one NCCL island of 2 GPUs"; timeout 60 $T run --timeout 30s --island nvidia=cuda:2 -- $W check 2>&1 | grep -E "OK rank|FAIL|ERROR|exited|async" | cut -c1-200
echo "== direct: 2-GPU island"; timeout 60 $T run --timeout 30s --island nvidia=cuda:2 -- $B direct --sizes 1M,4M,16M,64M,256M --iters 50 2>&1 | grep -o '{.*}'
echo "== copy on both GPUs at once, both directions"; (CUDA_VISIBLE_DEVICES=0 timeout 30 $B copy --mib 256 & CUDA_VISIBLE_DEVICES=1 timeout 30 $B copy --mib 256; wait)
