// common/vendor: the one table of device families — what a rank's device string is made of and how a
// launcher gives a rank its device. Everything outside the device layer that must know a vendor's device
// asks this table, never a literal "cuda": the launcher (--island DEVICE words, the visible-devices
// variable it sets per rank, MPS), world set-up (TESSERA_DEVICE), the planner's model; the Python package's copy is
// written from this header when it is built (scripts/gen-families-py.py: rows of literals only). A family is one row;
// its runtime and collective-library rows live in comm's device layer and are named here by `runtime` and `ccl`.
//
// Device strings: "host" (no device: the rank computes on the CPU) or PREFIX:INDEX ("cuda:0").
#pragma once

#include <string>
#include <string_view>

#include "tessera/status.hpp"

namespace tessera {

struct DeviceFamily {
  const char* prefix;       // device string prefix and --island DEVICE word: "cuda" (cuda:N)
  const char* label;        // its name in messages: "CUDA" ("no CUDA device is visible")
  const char* visible_env;  // the runtime's visible-devices variable: "CUDA_VISIBLE_DEVICES"
  const char* torch_type;   // the torch device type of such a rank: "cuda" ("" for none)
  const char* runtime;      // the device runtime row (comm/runtime): "cuda"
  const char* ccl;          // the collective library row (comm/ccl): "nccl" ("" for none)
  bool mps;                 // NVIDIA MPS can cap a rank's SM share (tessera run --sm-share)
  // The vendor names of a catalog type or an island that mean this family, space-separated, the usual island
  // name first ("ascend huawei"); "" for none.
  const char* vendors;
  // The Slurm GRES name of one card ("gpu"); "" for none published: a catalog type without its own `slurm_gres`
  // then uses its vendor name.
  const char* slurm_gres = "";
};

// The families this build knows, one row each. Sources of the non-NVIDIA values:
// - npu: ASCEND_RT_VISIBLE_DEVICES, the ACL runtime's visible-devices variable (Huawei CANN environment
//   variable reference, "ASCEND_RT_VISIBLE_DEVICES": logical device IDs, comma-separated, ascending, the
//   process then sees them as indices 0..n-1); torch device type "npu" (torch_npu renames PrivateUse1 to
//   "npu"); runtime ACL (libascendcl.so), library HCCL.
// - musa: MUSA_VISIBLE_DEVICES, the MUSA runtime's counterpart of CUDA_VISIBLE_DEVICES (Moore Threads' MUSA
//   SDK and torch_musa deployments use it so; no published header defines it); torch device type "musa"
//   (torch_musa); runtime MUSA (libmusart.so), library MCCL.
// - corex: Iluvatar CoreX, CUDA- and NCCL-shaped under its own install prefix (FlagOpen/FlagCX's Iluvatar
//   adaptor: iluvatar_corex_adaptor.h includes cuda_runtime.h and nccl.h); torch device type "cuda" (CoreX's torch
//   build is CUDA's); runtime corex (its libcudart), library ixccl (its libnccl). ASSUMED, not published: its
//   visible-devices variable is CUDA_VISIBLE_DEVICES.
// - emu: Tessera's emulated device (comm/runtime/runtime_emu): a test device in host memory with a runtime's
//   contract, so the device ranks' code runs without a GPU; no torch device type and no collective library ("":
//   an island of emu ranks stages its island phases through the host path; a world of emu ranks alone is refused).
// The family's runtime row picks its rank (comm/device OpenDeviceRank): the device bridge (device_bridge_rank) where
// the row has it — cuda, emu — else pinned staging (staged_rank) — npu, musa, corex; comm/runtime counts each family's
// devices.
inline constexpr DeviceFamily kDeviceFamilies[] = {
    {"cuda", "CUDA", "CUDA_VISIBLE_DEVICES", "cuda", "cuda", "nccl", true, "nvidia", "gpu"},
    {"npu", "Ascend NPU", "ASCEND_RT_VISIBLE_DEVICES", "npu", "acl", "hccl", false, "ascend huawei", "npu"},
    {"musa", "MUSA", "MUSA_VISIBLE_DEVICES", "musa", "musa", "mccl", false,
     "moore mthreads moore-threads moorethreads"},
    {"corex", "Iluvatar CoreX", "CUDA_VISIBLE_DEVICES", "cuda", "corex", "ixccl", false, "iluvatar"},
    {"emu", "emulated", "TESSERA_EMU_VISIBLE_DEVICES", "", "emu", "", false, ""},
};

// The row whose prefix is `prefix` ("cuda"), or null.
const DeviceFamily* FindDeviceFamily(std::string_view prefix);
// The family a vendor name means ("nvidia" -> cuda, "huawei" -> npu; one of DeviceFamily::vendors, or a prefix
// itself), or null.
const DeviceFamily* FindFamilyOfVendor(std::string_view vendor);
// "host or cuda" ("host, cuda or npu"): the DEVICE words a user may give, for messages.
std::string DeviceWords();

// A parsed device string: family null for "host".
struct DeviceName {
  const DeviceFamily* family = nullptr;
  int index = 0;
  bool host() const { return family == nullptr; }
  std::string ToString() const;  // "host", "cuda:3"
};
// Parses "host" or PREFIX:INDEX; InvalidArgument naming `what` (e.g. "TESSERA_DEVICE") and the value.
Result<DeviceName> ParseDeviceName(const std::string& text, const std::string& what);

}  // namespace tessera
