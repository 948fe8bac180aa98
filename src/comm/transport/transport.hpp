// comm/transport/transport: a transport is a row — the interface every way of joining two ranks implements
// (shm, ucx, tcp), and how a pair of ranks picks its row.
//
// A row has a name, capabilities (what the engine and the device bridge may ask of its channels; nothing
// compares names), whether it can run here (its library loaded, its device present), a domain (two ranks
// whose domains are equal can be joined by it), a connection blob each rank publishes in the store with its
// record, and a connect step bounded by a deadline. Each pair of ranks takes the first row of the transport
// order (TESSERA_TRANSPORTS; TESSERA_BRIDGE is its older, narrower form) that is viable on both sides and
// whose domains match: every rank computes every pair's row from the same published records, so both ends
// agree. Adding a row: implement Transport, add it to MakeTransports (transport.cpp) and to the names
// TESSERA_TRANSPORTS accepts (docs/architecture.md, "Transports").
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/channel.hpp"
#include "common/env.hpp"
#include "tessera/status.hpp"

namespace tessera::comm {

class StoreClient;

struct TransportCaps {
  // Reaches only ranks that share memory with this one (its domain is the host's identity).
  bool host_local = false;
  // Its channels are host rings a device's copy engines can register (SendChannel::dma / RecvChannel::dma).
  // A device bridge puts a link of a row without them behind a TcpRelay (transport/relay.hpp).
  bool rings = false;
  // Moves bytes on an RDMA transport, past the kernel's TCP stack (what the default order asks of ucx).
  bool rdma = false;
  // In the default order (TESSERA_TRANSPORTS=auto) only where it moves bytes on RDMA (ucx: over TCP alone the tcp
  // row is faster); naming it in TESSERA_TRANSPORTS takes it anyway.
  bool default_needs_rdma = false;
};

// What a row sees of the communicator while it joins its peers.
struct TransportSetup {
  int rank = 0;
  int size = 1;
  std::string token;             // the job token (a TCP hello carries it)
  std::string name_prefix;       // distinct per job and communicator (shm segment names)
  StoreClient* store = nullptr;  // the communicator's store (barriers)
  std::chrono::milliseconds timeout = env::DeclaredDuration("TESSERA_TIMEOUT");
  std::function<std::string(int)> peer_name;
  std::string host_addr;        // the address other hosts reach this rank at (TESSERA_BRIDGE_ADDR, else the host name)
  bool loopback_store = false;  // the store is on a loopback address (a job on one host)
  // Bytes of the ring that carries what rank `from` sends rank `to` (rows with rings).
  std::function<size_t(int from, int to)> ring_bytes;
  std::vector<std::string> blobs;  // per rank: what it published for this row ("" where the row is not viable there)
};

// Both directions to one peer.
struct Link {
  int peer = -1;
  std::unique_ptr<SendChannel> send;
  std::unique_ptr<RecvChannel> recv;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual TransportCaps caps() const = 0;
  // Ok where the row can run in this process; otherwise why not (the library is missing, no device).
  virtual Status Viable() const = 0;
  // Ranks whose domains are equal can be joined by this row: shm the host's identity, tcp every host ("ip").
  virtual std::string Domain() const = 0;
  // Prepares this rank's end (a listener, a worker) and returns what a peer needs to reach it: published in
  // the store with this rank's record. Called once, before Connect, where the row is viable.
  virtual Result<std::string> Listen(const TransportSetup& setup) = 0;
  // Joins this rank to `peers` (ascending; possibly none), both directions, by `deadline`. Every rank of the
  // communicator calls it for every row of the registry, in the registry's order (a row may use the store's
  // barriers); `setup.blobs` holds what each rank published.
  virtual Result<std::vector<Link>> Connect(const TransportSetup& setup, const std::vector<int>& peers,
                                            std::chrono::steady_clock::time_point deadline) = 0;
};

// Every row this build has, in registry order: shm, ucx (where UCX's headers were found at build time), tcp.
std::vector<std::unique_ptr<Transport>> MakeTransports();

// The transport orders of a rank: for pairs inside an island and for pairs across islands (the bridge).
// TESSERA_TRANSPORTS sets both; TESSERA_BRIDGE (auto, shm, tcp) only the bridge's, as before it existed.
struct TransportOrder {
  std::vector<std::string> island;
  std::vector<std::string> bridge;
  bool automatic = true;       // TESSERA_TRANSPORTS=auto (TransportCaps::default_needs_rdma applies)
  std::string Encode() const;  // "shm,tcp/shm,tcp": published in the rank's record
};
Result<TransportOrder> TransportOrderFromEnv(const std::vector<std::unique_ptr<Transport>>& rows);

// One rank's published view of one row: viable (with its domain and blob) or not (with the reason).
struct RowRecord {
  bool viable = false;
  std::string domain;
  std::string blob;
  std::string why_not;
};
// The rows' part of a rank's record, and back (every field hex-encoded, so any bytes fit).
std::string EncodeRowRecords(const std::vector<std::string>& names, const std::vector<RowRecord>& rows);
Result<std::vector<RowRecord>> DecodeRowRecords(const std::vector<std::string>& names, const std::string& text);

// The row joining ranks a and b: the first of `order` viable on both with equal domains; its index in
// `names`. The error names both ranks and, for each row of the order, why it does not join them.
Result<int> ChooseRow(const std::vector<std::string>& names, const std::vector<std::string>& order,
                      const std::vector<RowRecord>& a, const std::vector<RowRecord>& b, const std::string& a_name,
                      const std::string& b_name);

}  // namespace tessera::comm
