// ckpt/bench: `tessera ckpt bench` — N GiB in M shards, each number against a reference measured in the
// same run on the same disk/server: save vs parallel `dd conv=fsync`, snapshot (blocking) vs memcpy,
// restore vs parallel `dd` read (page cache dropped for the files first), S3 upload vs `curl --upload-file`.
#pragma once

#include <string>

#include "tessera/status.hpp"

namespace tessera::ckpt {

struct BenchOptions {
  std::string dir;       // where to write (the disk under test)
  double gib = 2;        // total bytes, split over `shards`
  int shards = 4;        // writer ranks (threads here, one file each)
  int reps = 3;          // the median is reported
  std::string s3_uri;    // "" = skip the S3 part
  std::string json_out;  // "" = no JSON
};

Status RunBench(const BenchOptions& opt);

}  // namespace tessera::ckpt
