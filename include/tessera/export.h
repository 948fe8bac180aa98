/* tessera/export.h — TESSERA_API marks what libtessera exports: the C API (tessera.h, ckpt.h) and the public
 * C++ API (status.hpp, comm.hpp, ckpt.hpp). The library is built with hidden visibility, so nothing else
 * leaves it (tests/structure checks the exported set against tests/structure/public_symbols.txt). */
#ifndef TESSERA_EXPORT_H_
#define TESSERA_EXPORT_H_

#if defined(__cplusplus) && (defined(__GNUC__) || defined(__clang__))
#define TESSERA_API [[gnu::visibility("default")]] /* may follow [[nodiscard]]: class [[nodiscard]] TESSERA_API X */
#elif defined(__GNUC__) || defined(__clang__)
#define TESSERA_API __attribute__((visibility("default")))
#else
#define TESSERA_API
#endif

#endif /* TESSERA_EXPORT_H_ */
