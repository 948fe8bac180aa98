// comm/store/wire: the rendezvous store's wire format, shared by its server (server.cpp), its
// gate for unauthenticated connections (gate.cpp) and its client (client.cpp). Internal to
// comm; the protocol is described in server.cpp's opening comment.
//
// Every message is a frame `u32 length (big-endian) | payload`; strings are `u32 length | bytes`,
// integers big-endian. Writer builds a frame, Reader parses a payload (ok() turns false, and stays false,
// on a short or malformed payload), ReadFrame reads one frame of bounded size as its bytes arrive.
#pragma once

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>

#include "comm/store/store.hpp"
#include "common/net.hpp"

namespace tessera::comm::store_wire {

using net::Clock;
using net::Io;
using std::chrono::milliseconds;

inline constexpr uint32_t kMagic = 0x54535231;                 // "TSR1"
inline constexpr uint32_t kMaxHandshake = 4096;                // magic + token
inline constexpr uint32_t kMaxFrame = StoreLimits::kMaxFrame;  // see StoreLimits
inline constexpr milliseconds kClientWriteTimeout{60000};      // a client that stops reading its replies is dropped
inline constexpr size_t kFrameGrowth = 64 << 10;               // a frame's buffer grows as its bytes arrive
inline constexpr milliseconds kReplyMargin{5000};              // how late the server's answer to a wait may be
inline constexpr milliseconds kWaitSlice{100};                 // how often a waiting server thread checks its client

enum class Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4, kBarrier = 5 };
enum class Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2, kRefused = 3, kBusy = 4 };

// ---- encoding ----------------------------------------------------------------------------------------

class Writer {
 public:
  Writer() { buf_.resize(4); }  // room for the frame length
  Writer& U8(uint8_t v) {
    buf_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& U32(uint32_t v) {
    for (int i = 3; i >= 0; --i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& I64(int64_t v) {
    const auto u = static_cast<uint64_t>(v);
    for (int i = 7; i >= 0; --i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    buf_.append(s);
    return *this;
  }
  // The finished frame, length prefix filled in.
  const std::string& Frame() {
    const auto n = static_cast<uint32_t>(buf_.size() - 4);
    for (int i = 0; i < 4; ++i) buf_[i] = static_cast<char>((n >> (8 * (3 - i))) & 0xff);
    return buf_;
  }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  bool ok() const { return ok_; }
  bool AtEnd() const { return pos_ == s_.size(); }
  uint8_t U8() {
    if (!Need(1)) return 0;
    return static_cast<uint8_t>(s_[pos_++]);
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(s_[pos_++]);
    return v;
  }
  int64_t I64() {
    if (!Need(8)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(s_[pos_++]);
    return static_cast<int64_t>(v);
  }
  std::string Str() {
    const uint32_t n = U32();
    if (!Need(n)) return {};
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }

 private:
  bool Need(size_t n) {
    if (!ok_ || s_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  const std::string& s_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// ---- frames on a socket (net::ReadFull / WriteFull underneath) ----------------------------------------

// Reads one frame of at most `max` bytes into *payload, allocating only as its bytes arrive. kError with
// *err == EMSGSIZE for an oversize frame (its announced length in *announced when given).
inline Io ReadFrame(int fd, std::string* payload, uint32_t max, Clock::time_point deadline, int wake_fd, int* err,
                    uint32_t* announced = nullptr) {
  char hdr[4];
  Io r = net::ReadFull(fd, hdr, 4, deadline, wake_fd, err);
  if (r != Io::kOk) return r;
  uint32_t n = 0;
  for (char c : hdr) n = (n << 8) | static_cast<uint8_t>(c);
  if (announced != nullptr) *announced = n;
  if (n > max) {
    *err = EMSGSIZE;
    return Io::kError;
  }
  payload->clear();
  while (payload->size() < n) {
    const size_t at = payload->size();
    payload->resize(at + std::min<size_t>(n - at, kFrameGrowth));
    r = net::ReadFull(fd, payload->data() + at, payload->size() - at, deadline, wake_fd, err);
    if (r != Io::kOk) return r;
  }
  return Io::kOk;
}

// Writes a whole frame (Writer::Frame()) before the deadline; see net::WriteFull.
inline Io WriteFrame(int fd, const std::string& frame, Clock::time_point deadline, int wake_fd, int* err) {
  return net::WriteFull(fd, frame.data(), frame.size(), deadline, wake_fd, err);
}

// The big-endian u32 at the start of `b` (at least 4 bytes): a frame's announced length.
inline uint32_t FrameLen(const std::string& b) {
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<uint8_t>(b[i]);
  return n;
}

}  // namespace tessera::comm::store_wire
