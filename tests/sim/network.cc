// The simulated network: every call between the agent and the sidecar, and between the
// sidecar and the business, is an event that may be dropped, duplicated, delayed,
// reordered, partitioned, or lose its answer, as the seed's configuration says.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/callback_batch.h"
#include "common/coord/slots.h"
#include "common/base/status.h"
#include "tests/sim/world.h"

namespace eonce::sim::internal {

bool World::Partitioned() {
  if (!faults_active_) return false;
  int64_t t = clock_.NowMs() - start_ms_;
  for (auto [from, to] : config_.partitions) {
    if (t >= from && t < to) return true;
  }
  return false;
}

int64_t World::Delay(const LinkFaults& link) {
  int64_t spread = faults_active_ ? link.max_delay_ms - link.min_delay_ms : 2;
  return link.min_delay_ms + static_cast<int64_t>(net_random_.Uniform(spread + 1));
}

// Answers that arrive in one millisecond are handed over back to back inside one
// CallbackBatch, as a real client hands over the answers of one batched call: what they
// start together (the agent's moves, the sidecar's outcome records) is written together,
// and every seed's faults meet that path too.
class DeliveredTogether {
 public:
  explicit DeliveredTogether(EventLoop& loop) : loop_(loop) {}

  void Add(std::function<void()> deliver) {
    pending_.push_back(std::move(deliver));
    if (pending_.size() > 1) return;  // the delivery below is queued already
    loop_.After(0, [this] {
      std::vector<std::function<void()>> pending = std::move(pending_);
      pending_.clear();
      CallbackBatch together;
      for (auto& deliver : pending) deliver();
    });
  }

 private:
  EventLoop& loop_;
  std::vector<std::function<void()>> pending_;  // this millisecond's answers
};

class SimSidecarClient : public SidecarClient {
 public:
  explicit SimSidecarClient(World& w) : w_(w), answers_(w.loop_) {
    if (w_.options_.shards) {
      absl::StatusOr<SlotMap> map = w_.coord_->Read();
      if (map.ok()) map_ = std::make_shared<const SlotMap>(std::move(*map));
    }
  }

  // The sidecar node that takes `command` by the agent's cached map (the agent's
  // GrpcSidecarClient does the same with the map a sidecar served it).
  int NodeFor(const v1::Command& command) const {
    if (map_ == nullptr) return kSidecar;
    const std::string& owner = map_->OwnerOf(SlotOfCommand(command));
    return owner == "s1" ? kSidecar2 : kSidecar;
  }

  // After a refusal under a newer epoch, the agent asks the refusing sidecar for its map.
  void MaybeRefresh(int node, const absl::Status& status) {
    const std::string reason = ReasonOf(status);
    if (map_ == nullptr || (reason != "SLOT_MOVED" && reason != "SLOT_MIGRATING")) return;
    const ShardGate* gate = w_.sidecars_[ShardOfNode(node)].gate.get();
    if (!w_.node(node).up || gate == nullptr) return;
    std::shared_ptr<const SlotMap> held = gate->map();
    if (held == nullptr) return;
    if (held->epoch() > map_->epoch()) {
      w_.Trace(absl::StrCat("agent refreshes its slot map to epoch ", held->epoch()));
      map_ = std::move(held);
    }
  }

  template <typename T>
  struct Call {
    std::function<void(absl::StatusOr<T>)> done;
    bool finished = false;
  };

  template <typename T>
  std::function<void(absl::StatusOr<T>)> Finisher(std::function<void(absl::StatusOr<T>)> done,
                                                  int64_t deadline_ms) {
    auto call = std::make_shared<Call<T>>();
    call->done = std::move(done);
    // A call made by a process that is already dying is never answered.
    int caller = w_.node(kAgent).up ? w_.node(kAgent).incarnation : -1;
    auto finish = [this, call, caller](absl::StatusOr<T> answer) {
      if (call->finished) return;
      call->finished = true;
      if (!w_.Alive(kAgent, caller)) return;  // the caller died: nobody hears the answer
      // The agent hears them as its SubmitBatcher hands over a batch's answers: the
      // replayer then writes their moves together (OutboxStore::MutateMany).
      answers_.Add([this, call, caller, answer = std::move(answer)]() mutable {
        if (!w_.Alive(kAgent, caller)) return;
        call->done(std::move(answer));
      });
    };
    w_.loop_.At(deadline_ms, [finish] { finish(absl::DeadlineExceededError("deadline")); });
    return finish;
  }

  // Sends `deliver` to the sidecar, which answers through `answer`; applies the link's
  // faults both ways.
  template <typename T>
  void Send(int node, const std::string& what, std::function<void(absl::StatusOr<T>)> finish,
            std::function<void(std::function<void(absl::StatusOr<T>)>)> deliver) {
    const LinkFaults& link = w_.config_.agent_link;
    if (!w_.node(node).up) {
      w_.loop_.After(1, [finish] { finish(absl::UnavailableError("connection refused")); });
      return;
    }
    int copies = w_.Chance(link.duplicate) ? 2 : 1;
    for (int copy = 0; copy < copies; ++copy) {
      if (w_.Partitioned() || w_.Chance(link.drop)) {
        w_.Trace("net drop " + what);
        continue;
      }
      int target = w_.node(node).incarnation;
      w_.loop_.After(w_.Delay(link), [this, node, what, finish, deliver, target] {
        if (!w_.Alive(node, target)) return;
        w_.Trace("deliver " + what);
        deliver([this, node, what, finish, target](absl::StatusOr<T> answer) {
          if (!w_.Alive(node, target)) return;  // died before answering
          if (!answer.ok()) MaybeRefresh(node, answer.status());
          const LinkFaults& link = w_.config_.agent_link;
          if (w_.Partitioned() || w_.Chance(link.lose_answer)) {
            w_.Trace("net lose answer " + what);
            return;
          }
          w_.loop_.After(w_.Delay(link), [finish, answer] { finish(answer); });
        });
      });
    }
  }

  void Submit(const v1::Command& command, const Session& session, int64_t deadline_ms,
              std::function<void(absl::StatusOr<v1::SubmitResponse>)> done) override {
    auto finish = Finisher<v1::SubmitResponse>(std::move(done), deadline_ms);
    Caller caller;
    caller.tenant = session.tenant;
    caller.actor = session.actor;
    caller.credential_epoch = session.epoch;
    caller.deadline_ms = deadline_ms;
    const int node = NodeFor(command);
    Send<v1::SubmitResponse>(
        node, "submit " + command.command_id(), finish,
        [this, node, caller,
         command](std::function<void(absl::StatusOr<v1::SubmitResponse>)> answer) {
          w_.SubmitTo(ShardOfNode(node), caller, command, std::move(answer));
        });
  }

  void Reconcile(const v1::Command& command, const Session& session, int64_t deadline_ms,
                 std::function<void(absl::StatusOr<v1::ReconcileResponse>)> done) override {
    auto finish = Finisher<v1::ReconcileResponse>(std::move(done), deadline_ms);
    Caller caller;
    caller.tenant = session.tenant;
    v1::ReconcileRequest request = ReconcileRequestFor(command);
    const int node = NodeFor(command);
    Send<v1::ReconcileResponse>(
        node, "reconcile " + command.command_id(), finish,
        [this, node, caller,
         request](std::function<void(absl::StatusOr<v1::ReconcileResponse>)> answer) {
          answer(w_.sidecars_[ShardOfNode(node)].deduper->Reconcile(caller, request));
        });
  }

  std::optional<int64_t> RetentionMs(const std::string&) override {
    return RetentionOptions().retention_ms;
  }

 private:
  World& w_;
  std::shared_ptr<const SlotMap> map_;  // the agent's cached slot map (sharded worlds)
  DeliveredTogether answers_;  // the sidecar's answers to the agent
};

// ---------------------------------------------------------------------------------------
// sidecar -> business

class SimUpstream : public Upstream {
 public:
  SimUpstream(World& w, int node)
      : w_(w), node_(node), shard_(ShardOfNode(node)), business_(BusinessNode(shard_)),
        replies_(w.loop_) {}

  // SlotData.HoldSlotData, as the sidecar's coordinator calls it after each map it
  // acknowledges: answered at once by a business that is up (a hold repeats harmlessly).
  absl::StatusOr<v1::HoldSlotDataResponse> HoldSlotData(const v1::HoldSlotDataRequest& request,
                                                        int64_t /*deadline_ms*/) override {
    if (!w_.node(business_).up) return absl::UnavailableError("the business is down");
    return w_.inbox(shard_).HoldSlotData(request);
  }

  void Forward(ForwardCall call, std::function<void(ForwardReply)> done) override {
    w_.ForwardIssued(call.tenant, call.command_id, node_);
    auto state = std::make_shared<bool>(false);
    int caller = w_.node(node_).up ? w_.node(node_).incarnation : -1;
    auto finish = [this, state, caller, done, tenant = call.tenant,
                   command_id = call.command_id](ForwardReply reply) {
      if (*state) return;
      *state = true;
      if (!w_.Alive(node_, caller)) return;
      if (reply.kind == ForwardReply::Kind::kNotApplied ||
          reply.kind == ForwardReply::Kind::kRefused) {
        w_.ProvenNotApplied(tenant, command_id);
      }
      done(std::move(reply));
    };
    w_.loop_.At(call.deadline_ms, [finish] {
      ForwardReply reply;
      reply.kind = ForwardReply::Kind::kUnknown;
      reply.detail = "deadline";
      finish(reply);
    });
    const LinkFaults& link = w_.config_.business_link;
    if (!w_.node(business_).up) {
      w_.loop_.After(1, [finish] {
        ForwardReply reply;
        reply.kind = ForwardReply::Kind::kNotApplied;
        reply.detail = "connection refused";
        finish(reply);
      });
      return;
    }
    int copies = w_.Chance(link.duplicate) ? 2 : 1;
    for (int copy = 0; copy < copies; ++copy) {
      if (w_.Chance(link.drop)) {
        w_.Trace("net drop forward " + call.command_id);
        continue;
      }
      int target = w_.node(business_).incarnation;
      // A late forward reaches the business after the sidecar gave up on it (its deadline
      // passed, and it may have asked for the outcome, or the slot moved, meanwhile).
      int64_t delay = w_.Delay(link);
      if (w_.Chance(w_.config_.late_forward)) {
        delay = call.deadline_ms - w_.clock_.NowMs() + 1 +
                static_cast<int64_t>(w_.net_random_.Uniform(6'000));
        w_.Trace("late forward " + call.command_id);
      }
      w_.loop_.After(delay, [this, call, finish, target] {
        if (!w_.Alive(business_, target)) return;
        absl::StatusOr<v1::CallResult> result = Apply(call);
        if (!w_.Alive(business_, target)) return;  // crashed after applying
        if (IsSlotFenced(result.status())) {
          // Nothing applied, and no outcome: the sidecar hears FAILED_PRECONDITION
          // SLOT_FENCED, as GrpcUpstream classifies it.
          w_.Trace(absl::StrCat("fenced ", call.command_id, " at epoch ", call.slot_epoch));
          w_.result_->fenced++;
          ForwardReply reply;
          reply.kind = ForwardReply::Kind::kNotApplied;
          reply.detail = std::string(result.status().message());
          w_.loop_.After(w_.Delay(w_.config_.business_link), [this, finish, reply] {
            replies_.Add([finish, reply] { finish(reply); });
          });
          return;
        }
        const bool conflict = IsKeyConflict(result.status());
        if ((!result.ok() && !conflict) || w_.Chance(w_.config_.business_link.lose_answer)) {
          w_.Trace("no answer to forward " + call.command_id);
          return;
        }
        ForwardReply reply;
        if (conflict) {
          w_.Trace("key conflict " + call.command_id);
          reply.kind = ForwardReply::Kind::kConflict;
          reply.detail = ReasonOf(result.status());
        } else {
          w_.Trace(absl::StrCat("applied ", call.command_id, " code ", result->code()));
          reply.kind = ForwardReply::Kind::kAnswered;
          reply.result = *result;
          // What the real business says in its `eonce-inbox` trailer; the negative
          // control makes a legacy business claim it too.
          reply.inbox_kept =
              !w_.inbox(shard_).legacy_mode() || w_.options_.legacy_claims_inbox;
        }
        // The sidecar hears them as GrpcUpstream hands over a batch call's answers: the
        // Deduper then writes their outcome records together. A slow disk holds the
        // answer until its sync is done.
        const int64_t sync_ms = w_.faults_active_ && w_.options_.shards
                                    ? static_cast<int64_t>(w_.net_random_.Uniform(
                                          w_.config_.slow_sync_ms[shard_] + 1))
                                    : 0;
        w_.loop_.After(sync_ms + w_.Delay(w_.config_.business_link), [this, finish, reply] {
          replies_.Add([finish, reply] { finish(reply); });
        });
      });
    }
  }

  void QueryOutcome(const std::string& tenant, const std::string& command_id, int64_t deadline_ms,
                    std::function<void(absl::StatusOr<v1::QueryOutcomeResponse>)> done) override {
    auto state = std::make_shared<bool>(false);
    int caller = w_.node(node_).up ? w_.node(node_).incarnation : -1;
    auto finish = [this, state, caller, done, tenant,
                   command_id](absl::StatusOr<v1::QueryOutcomeResponse> r) {
      if (*state) return;
      *state = true;
      if (!w_.Alive(node_, caller)) return;
      if (r.ok() && !r->applied()) w_.ProvenNotApplied(tenant, command_id);
      done(std::move(r));
    };
    w_.loop_.At(deadline_ms, [finish] { finish(absl::DeadlineExceededError("deadline")); });
    if (!w_.node(business_).up) {
      w_.loop_.After(1, [finish] { finish(absl::UnavailableError("connection refused")); });
      return;
    }
    int target = w_.node(business_).incarnation;
    w_.loop_.After(w_.Delay(w_.config_.business_link), [this, tenant, command_id, finish, target] {
      if (!w_.Alive(business_, target)) return;
      auto outcome = w_.inbox(shard_).QueryOutcome(tenant, command_id);
      w_.loop_.After(w_.Delay(w_.config_.business_link), [finish, outcome] { finish(outcome); });
    });
  }

  bool Reachable() override { return w_.node(business_).up; }

 private:
  absl::StatusOr<v1::CallResult> Apply(const ForwardCall& call) {
    CallIdentity id;
    id.command_id = call.command_id;
    id.tenant = call.tenant;
    id.actor = call.actor;
    id.idempotency_key = call.idempotency_key;
    id.payload_sha256 = call.payload_sha256;
    id.fencing_token = call.fencing_token;
    id.slot = call.slot;
    id.slot_epoch = call.slot_epoch;
    // The negative control: the forward claims whatever epoch the slot's fence is at, so
    // that the business's check lets every write through, as if it were not there.
    if (w_.options_.no_business_fence && call.slot_epoch > 0) {
      // Past a handed-off slot's fence too, as if the fence were not checked at all.
      const SlotFences& fences = w_.inbox(shard_).fences();
      id.slot_epoch = std::max(call.slot_epoch,
                               fences.fence(call.slot) + (fences.handed_off(call.slot) ? 1 : 0));
    }
    if (size_t slash = call.entity.find('/'); slash != std::string::npos) {
      id.entity_type = call.entity.substr(0, slash);
      id.entity_id = call.entity.substr(slash + 1);
    }
    if (call.method == kOpen) {
      ledger::v1::OpenAccountRequest request;
      request.ParseFromString(call.request);
      return w_.ledger(shard_).OpenAccount(id, request);
    }
    if (call.method == kCredit) {
      ledger::v1::CreditRequest request;
      request.ParseFromString(call.request);
      return w_.ledger(shard_).Credit(id, request);
    }
    ledger::v1::TransferRequest request;
    request.ParseFromString(call.request);
    return w_.ledger(shard_).Transfer(id, request);
  }

  World& w_;
  const int node_;  // the sidecar that forwards through this
  const int shard_;
  const int business_;  // the business it forwards to
  DeliveredTogether replies_;  // the business's answers to the sidecar
};

std::unique_ptr<SidecarClient> NewSimSidecarClient(World& world) {
  return std::make_unique<SimSidecarClient>(world);
}

std::unique_ptr<Upstream> NewSimUpstream(World& world, int node) {
  return std::make_unique<SimUpstream>(world, node);
}

}  // namespace eonce::sim::internal
