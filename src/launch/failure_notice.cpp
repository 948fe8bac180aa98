// launch/failure_notice: the cross-node notice of a failed rank (see failure_notice.hpp).
#include "launch/failure_notice.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <sstream>
#include <utility>

#include "common/log.hpp"

namespace tessera::launch {

FailureNotice::FailureNotice(std::string address, std::string token, int node,
                             std::chrono::milliseconds connect_timeout, int wake_fd, unsigned char wake_byte)
    : address_(std::move(address)),
      token_(std::move(token)),
      node_(node),
      connect_timeout_(connect_timeout),
      wake_fd_(wake_fd),
      wake_byte_(wake_byte) {
  thread_ = std::thread([this] { Watch(); });
}

FailureNotice::~FailureNotice() {
  std::shared_ptr<Sent> sent;
  {
    std::unique_lock<std::mutex> l(mu_);
    if (pending_) settled_cv_.wait_for(l, connect_timeout_, [&] { return settled_; });
    sent = sent_;
  }
  if (sent) {
    std::unique_lock<std::mutex> l(sent->mu);
    sent->cv.wait_for(l, kPostWait, [&] { return sent->done; });
  }
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void FailureNotice::Post(int rank, int code, const std::string& what) {
  const std::string value = fmt::format("{} {} {} {}", node_, rank, code, what);
  std::lock_guard<std::mutex> l(mu_);
  if (poster_ == nullptr) {
    if (!pending_) pending_ = value;
    return;
  }
  if (sent_) return;  // the first post is the only one
  sent_ = std::make_shared<Sent>();
  // On a thread of its own, which owns what it uses: the store's Set is bounded only by the client's 30 s.
  std::thread([client = poster_, sent = sent_, value] {
    if (Status s = client->Set(kKey, value); !s.ok())
      TSR_LOG_WARN("tessera run: cannot tell the other nodes: {}", s.message());
    {
      std::lock_guard<std::mutex> g(sent->mu);
      sent->done = true;
    }
    sent->cv.notify_all();
  }).detach();
}

std::optional<FailureNotice::Notice> FailureNotice::Take() {
  std::lock_guard<std::mutex> l(mu_);
  return notice_;
}

void FailureNotice::Watch() {
  // Connect (node 0's store may come up after this node), in steps so that a stop is noticed.
  std::unique_ptr<comm::StoreClient> waiter, poster;
  const auto deadline = std::chrono::steady_clock::now() + connect_timeout_;
  while (!stop_ && (waiter == nullptr || poster == nullptr) && std::chrono::steady_clock::now() < deadline) {
    for (auto* c : {&waiter, &poster}) {
      if (*c != nullptr) continue;
      auto r = comm::StoreClient::Connect(address_, token_, std::chrono::seconds(1));
      if (r.ok()) *c = std::move(r).value();
    }
  }
  if (waiter == nullptr || poster == nullptr) {
    {
      std::lock_guard<std::mutex> l(mu_);
      settled_ = true;
    }
    settled_cv_.notify_all();
    if (!stop_)
      TSR_LOG_WARN("tessera run: cannot reach the job's store at {}: no notice of the other nodes' failures", address_);
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    poster_ = std::shared_ptr<comm::StoreClient>(std::move(poster));
    if (pending_) (void)poster_->Set(kKey, *pending_);
    settled_ = true;
  }
  settled_cv_.notify_all();
  while (!stop_) {
    auto v = waiter->Get(kKey, kPoll);
    if (!v.ok()) {
      if (v.status().code() == Code::kTimeout) continue;
      return;  // the store went away (node 0 is done): nothing more to hear
    }
    Notice n;
    std::istringstream in(*v);
    in >> n.node >> n.rank >> n.code;
    std::getline(in >> std::ws, n.what);
    if (!in.fail() && n.node != node_) {
      {
        std::lock_guard<std::mutex> l(mu_);
        notice_ = n;
      }
      (void)!::write(wake_fd_, &wake_byte_, 1);
    }
    return;  // the first post is the only one
  }
}

}  // namespace tessera::launch
