/* A C consumer of the installed libtessera, built with `pkg-config --cflags --libs tessera` only
 * (scripts/check-install.sh). Prints "ok" and exits 0 when the checks hold, else 1. */
#include <stdint.h>
#include <stdio.h>
#include <tessera/ckpt.h>
#include <tessera/tessera.h>

int main(int argc, char** argv) {
  int version = 0;
  int64_t step = 0;
  if (argc != 2) return 2;
  if (tsrGetVersion(&version) != tsrSuccess || version != TESSERA_VERSION_CODE) {
    fprintf(stderr, "consumer.c: tsrGetVersion gave %d, the header says %d\n", version, TESSERA_VERSION_CODE);
    return 1;
  }
  if (tsrCkptLatest(argv[1], &step) != tsrNotFound) {
    fprintf(stderr, "consumer.c: tsrCkptLatest of an empty root is not tsrNotFound: %s\n", tsrCkptGetLastError());
    return 1;
  }
  printf("ok\n");
  return 0;
}
