#include "bench/e2e.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "bench/commands.h"
#include "common/command/command.h"
#include "eonce/v1/agent.grpc.pb.h"
#include "eonce/v1/outcome.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace eonce::bench {
namespace {

using SteadyClock = std::chrono::steady_clock;

double Percentile(std::vector<double> values, int pct) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, values.size() * pct / 100)];
}

double WallMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// When each command's ACKED came through the agent's Watch stream, from a thread of its own.
class AckedTimes {
 public:
  explicit AckedTimes(v1::Agent::Stub& agent) {
    // ACKED alone: the steps before it neither travel nor wake this reader, as for a
    // producer that waits for its commands' ends.
    v1::WatchRequest acked;
    acked.add_states(v1::ACKED);
    reader_ = agent.Watch(&context_, acked);
    // The headers say "subscribed": no change after them is missed.
    reader_->WaitForInitialMetadata();
    thread_ = std::thread([this] {
      v1::WatchEvent event;
      while (reader_->Read(&event)) {
        if (event.state() != v1::ACKED || event.command_id().rfind("e2e-", 0) != 0) continue;
        absl::MutexLock lock(&mu_);
        acked_.emplace(event.command_id(), SteadyClock::now());
      }
      reader_->Finish();  // cancelled, or cut off: either way the stream is over
      absl::MutexLock lock(&mu_);
      ended_ = true;
    });
  }
  ~AckedTimes() {
    context_.TryCancel();
    thread_.join();
  }

  // Waits until every one of `ids` was ACKED (or the stream ended, or `wait` passed);
  // true if all were.
  bool WaitFor(const std::vector<std::string>& ids, std::chrono::milliseconds wait) {
    absl::MutexLock lock(&mu_);
    auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (ended_) return true;
      for (const std::string& id : ids) {
        if (acked_.count(id) == 0) return false;
      }
      return true;
    };
    mu_.AwaitWithTimeout(absl::Condition(&all), absl::FromChrono(wait));
    for (const std::string& id : ids) {
      if (acked_.count(id) == 0) return false;
    }
    return true;
  }

  std::optional<SteadyClock::time_point> At(const std::string& id) {
    absl::MutexLock lock(&mu_);
    auto it = acked_.find(id);
    if (it == acked_.end()) return std::nullopt;
    return it->second;
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> reader_;
  std::thread thread_;
  absl::Mutex mu_;
  std::map<std::string, SteadyClock::time_point> acked_ ABSL_GUARDED_BY(mu_);
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

// A command enqueued: its id, and when its Enqueue returned (steady and wall clock).
struct Enqueued {
  std::string id;
  SteadyClock::time_point returned;
  double returned_wall_ms = 0;
  bool ok = false;
};

v1::EnqueueRequest EnqueueOf(const std::string& id, int accounts, int64_t i) {
  v1::Command c = TransferCommand(id, accounts, i);
  c.clear_idempotency_key();  // the agent derives them
  c.clear_payload_hash();
  v1::EnqueueRequest request;
  *request.mutable_command() = std::move(c);
  return request;
}

// The latencies of `sent` to ACKED, and to the ledger's effect for up to kMaxEffectQueries
// of them (spread evenly).
EndToEndLatency Summarize(const std::vector<Enqueued>& sent, AckedTimes& acked,
                          v1::Outcome::Stub& ledger) {
  EndToEndLatency out;
  std::vector<double> to_acked, to_effect;
  for (const Enqueued& e : sent) {
    auto at = e.ok ? acked.At(e.id) : std::nullopt;
    if (!at.has_value()) {
      ++out.missing;
      continue;
    }
    // The ACKED notice may overtake the Enqueue's answer on its way to this client.
    to_acked.push_back(std::max(
        0.0, std::chrono::duration<double, std::micro>(*at - e.returned).count()));
  }
  out.commands = static_cast<int64_t>(to_acked.size());
  out.acked_p50_us = Percentile(to_acked, 50);
  out.acked_p99_us = Percentile(to_acked, 99);
  const size_t step = std::max<size_t>(1, sent.size() / kMaxEffectQueries);
  for (size_t k = 0; k < sent.size(); k += step) {
    if (!sent[k].ok) continue;
    grpc::ClientContext context;
    context.AddMetadata(kComponentHeader, "bench");
    context.AddMetadata(kTenantHeader, "bench");
    v1::QueryOutcomeRequest request;
    request.set_command_id(sent[k].id);
    v1::QueryOutcomeResponse response;
    if (ledger.QueryOutcome(&context, request, &response).ok() && response.applied()) {
      to_effect.push_back(std::max(0.0, response.applied_at_ms() - sent[k].returned_wall_ms));
    }
  }
  out.effect_p50_ms = Percentile(to_effect, 50);
  out.effect_p99_ms = Percentile(to_effect, 99);
  return out;
}

}  // namespace

absl::Status BenchEndToEnd(const std::string& agent_address, const std::string& ledger_address,
                           int accounts, double seconds, double offered_per_s,
                           EndToEndFigures* out) {
  auto agent = v1::Agent::NewStub(
      grpc::CreateChannel(agent_address, grpc::InsecureChannelCredentials()));
  auto ledger = v1::Outcome::NewStub(
      grpc::CreateChannel(ledger_address, grpc::InsecureChannelCredentials()));
  AckedTimes acked(*agent);
  constexpr auto kWait = std::chrono::seconds(30);  // for one command, or a loaded run's tail

  // One at a time: the next command is enqueued once the last one is ACKED.
  std::vector<Enqueued> one;
  const auto one_end = SteadyClock::now() + std::chrono::duration<double>(seconds);
  for (int64_t i = 0; SteadyClock::now() < one_end; ++i) {
    Enqueued e;
    e.id = absl::StrCat("e2e-one-", i);
    grpc::ClientContext context;
    v1::EnqueueResponse response;
    e.ok = agent->Enqueue(&context, EnqueueOf(e.id, accounts, i), &response).ok();
    e.returned = SteadyClock::now();
    e.returned_wall_ms = WallMs();
    one.push_back(e);
    if (!e.ok) return absl::UnavailableError("the agent refused an Enqueue");
    if (!acked.WaitFor({e.id}, kWait)) break;
  }
  out->one = Summarize(one, acked, *ledger);
  if (offered_per_s <= 0) return absl::OkStatus();

  // Open loop: command k is offered at start + k / rate, whether or not the earlier ones
  // were answered (at most kMaxOutstanding unanswered Enqueues; past it, one is skipped).
  constexpr int64_t kMaxOutstanding = 20'000;
  out->offered_per_s = offered_per_s;
  const int64_t total = std::max<int64_t>(1, static_cast<int64_t>(offered_per_s * seconds));
  auto loaded = std::make_shared<std::vector<Enqueued>>(static_cast<size_t>(total));
  struct Shared {
    absl::Mutex mu;
    int64_t outstanding ABSL_GUARDED_BY(mu) = 0;
  };
  auto shared = std::make_shared<Shared>();
  const auto start = SteadyClock::now();
  for (int64_t k = 0; k < total; ++k) {
    std::this_thread::sleep_until(
        start + std::chrono::duration_cast<SteadyClock::duration>(
                    std::chrono::duration<double>(k / offered_per_s)));
    (*loaded)[k].id = absl::StrCat("e2e-loaded-", k);
    {
      absl::MutexLock lock(&shared->mu);
      if (shared->outstanding >= kMaxOutstanding) continue;
      ++shared->outstanding;
    }
    struct Call {
      grpc::ClientContext context;
      v1::EnqueueRequest request;
      v1::EnqueueResponse response;
    };
    auto call = std::make_shared<Call>();
    call->request = EnqueueOf((*loaded)[k].id, accounts, k);
    agent->async()->Enqueue(&call->context, &call->request, &call->response,
                            [call, loaded, shared, k](grpc::Status s) {
                              const auto returned = SteadyClock::now();
                              const double returned_wall_ms = WallMs();
                              // Under the lock: the summary reads `loaded` under it.
                              absl::MutexLock lock(&shared->mu);
                              Enqueued& e = (*loaded)[k];
                              e.returned = returned;
                              e.returned_wall_ms = returned_wall_ms;
                              e.ok = s.ok();
                              --shared->outstanding;
                            });
  }
  {
    absl::MutexLock lock(&shared->mu);
    auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(shared->mu) {
      return shared->outstanding == 0;
    };
    shared->mu.AwaitWithTimeout(absl::Condition(&answered), absl::FromChrono(kWait));
  }
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&shared->mu);
    for (const Enqueued& e : *loaded) {
      if (e.ok) ids.push_back(e.id);
    }
  }
  acked.WaitFor(ids, kWait);
  absl::MutexLock lock(&shared->mu);  // every callback that wrote `loaded` has ended
  out->loaded = Summarize(*loaded, acked, *ledger);
  return absl::OkStatus();
}

std::string EndToEndJson(const EndToEndFigures& f, double budget_us) {
  auto latency = [](const EndToEndLatency& l) {
    return absl::StrFormat(
        "{\"commands\": %d, \"missing\": %d, \"acked_p50_us\": %.1f, \"acked_p99_us\": %.1f, "
        "\"effect_p50_ms\": %.1f, \"effect_p99_ms\": %.1f}",
        l.commands, l.missing, l.acked_p50_us, l.acked_p99_us, l.effect_p50_ms, l.effect_p99_ms);
  };
  return absl::StrFormat(
      "{\"budget_us\": %.1f, \"one\": %s, \"offered_per_s\": %.1f, \"loaded\": %s}",
      budget_us, latency(f.one), f.offered_per_s, latency(f.loaded));
}

std::string EndToEndText(const EndToEndFigures& f, double budget_us) {
  if (f.one.commands == 0) return "";
  std::string text = absl::StrFormat(
      "end to end, Enqueue returned -> ACKED at the agent: 1 in flight p50 %.0f us, p99 %.0f us "
      "(%d commands; budget synced put + two-hop echo + synced put = %.0f us: %.2fx); to the "
      "ledger's effect p50 %.0f ms, p99 %.0f ms (its time has a millisecond's resolution)\n",
      f.one.acked_p50_us, f.one.acked_p99_us, f.one.commands, budget_us,
      budget_us > 0 ? f.one.acked_p50_us / budget_us : 0, f.one.effect_p50_ms,
      f.one.effect_p99_ms);
  if (f.offered_per_s > 0) {
    absl::StrAppend(&text, absl::StrFormat(
        "end to end, open loop at %.0f/s (half the drain's rate): ACKED p50 %.0f us, p99 %.0f us "
        "(%d commands, %d not seen ACKED); to the effect p50 %.0f ms, p99 %.0f ms\n",
        f.offered_per_s, f.loaded.acked_p50_us, f.loaded.acked_p99_us, f.loaded.commands,
        f.loaded.missing, f.loaded.effect_p50_ms, f.loaded.effect_p99_ms));
  }
  return text;
}

}  // namespace eonce::bench
