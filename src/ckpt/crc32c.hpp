// ckpt/crc32c: CRC-32C (Castagnoli), the checksum of shard files and tensor pieces in a manifest.
// Uses the SSE4.2 crc32 instruction when the CPU has it, a table otherwise; Combine() joins the CRCs
// of two adjacent byte ranges so a file's CRC follows from its pieces' CRCs without a second pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::ckpt {

uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
// crc(A‖B) from crc(A), crc(B) and len(B).
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
std::string CrcHex(uint32_t crc);  // 8 lower-case hex digits
bool ParseCrcHex(const std::string& s, uint32_t* crc);

}  // namespace tessera::ckpt
