// throwaway probe (bench/results/single-copy-20261203T1719Z-h200): process_vm_readv vs memcpy on T threads
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
using Clock = std::chrono::steady_clock;
static size_t N = 256ull << 20;
int main(int argc, char** argv) {
  int p2c[2], c2p[2];
  pipe(p2c);
  pipe(c2p);
  char* src = (char*)aligned_alloc(4096, N);
  memset(src, 3, N);
  pid_t pid = fork();
  if (pid == 0) {
    char b;
    read(p2c[0], &b, 1);
    _exit(0);
  }
  char* dst = (char*)aligned_alloc(4096, N);
  memset(dst, 1, N);
  std::vector<int> Ts;
  for (int i = 1; i < argc; ++i) Ts.push_back(atoi(argv[i]));
  if (Ts.empty()) Ts = {1, 2, 4, 8, 16};
  const size_t tmpsz = 64 << 10;
  for (int T : Ts) {
    for (int mode = 0; mode < 4; ++mode) {
      std::vector<double> times;
      for (int rep = 0; rep < 5; ++rep) {
        auto t0 = Clock::now();
        std::vector<std::thread> th;
        for (int t = 0; t < T; ++t)
          th.emplace_back([=] {
            size_t lo = N * t / T, hi = N * (t + 1) / T;
            static thread_local std::vector<char> tmp(tmpsz);
            if (mode == 0)
              memcpy(dst + lo, src + lo, hi - lo);
            else if (mode == 1) {
              for (size_t o = lo; o < hi; o += 1 << 20) {
                size_t k = std::min<size_t>(1 << 20, hi - o);
                iovec l{dst + o, k}, r{src + o, k};
                if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)k) {
                  perror("readv");
                  exit(1);
                }
              }
            } else if (mode == 2) {
              for (size_t o = lo; o < hi; o += tmpsz) {
                size_t k = std::min(tmpsz, hi - o);
                iovec l{tmp.data(), k}, r{src + o, k};
                if (process_vm_readv(pid, &l, 1, &r, 1, 0) != (ssize_t)k) {
                  perror("readv");
                  exit(1);
                }
              }
            } else {
              for (size_t o = lo; o < hi; o += tmpsz) memcpy(tmp.data(), src + o, std::min(tmpsz, hi - o));
            }
          });
        for (auto& x : th) x.join();
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      std::sort(times.begin(), times.end());
      static const char* names[] = {"memcpy->mem", "readv->mem", "readv->64K", "memcpy->64K"};
      printf("T=%2d %-12s %6.2f GB/s (best %6.2f)\n", T, names[mode], N / times[2] / 1e9, N / times[0] / 1e9);
    }
  }
  write(p2c[1], "x", 1);
  waitpid(pid, nullptr, 0);
}
