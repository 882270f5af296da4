// What `eonce explain` reads of each component, one small interface each, so that the
// explainer (explainer.h) is tested with fakes and run against gRPC (grpc_views.h).
//
// Every read is bounded (pages, records scanned) and may fail: the explainer then tells a
// partial journey and names the part it could not read.
#ifndef EONCE_TOOLS_EXPLAIN_VIEWS_H_
#define EONCE_TOOLS_EXPLAIN_VIEWS_H_

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "eonce/v1/agent.pb.h"
#include "eonce/v1/outcome.pb.h"
#include "eonce/v1/sidecar.pb.h"

namespace eonce::explain {

// An outbox agent of the tenant.
class AgentView {
 public:
  virtual ~AgentView() = default;
  virtual std::string name() const = 0;
  // The record of `command_id`; nullopt when the agent holds none.
  virtual absl::StatusOr<std::optional<v1::OutboxRecord>> Get(const std::string& command_id) = 0;
  // The record whose idempotency key is `key`, if one is among the records scanned.
  virtual absl::StatusOr<std::optional<v1::OutboxRecord>> FindByKey(const std::string& key) = 0;
};

// One shard: its sidecar's operator reads, and its business's effects read through it.
class ShardView {
 public:
  virtual ~ShardView() = default;
  virtual std::string name() const = 0;
  // The audit events of `command_id`, or of `key` when command_id is empty.
  virtual absl::StatusOr<std::vector<v1::AuditEvent>> Audit(const std::string& command_id,
                                                            const std::string& key) = 0;
  virtual absl::StatusOr<std::vector<v1::ParkedRecord>> Parked() = 0;
  // The business's effects whose command id is one of `command_ids`.
  virtual absl::StatusOr<std::vector<v1::Effect>> Effects(
      const std::set<std::string>& command_ids) = 0;
};

}  // namespace eonce::explain

#endif  // EONCE_TOOLS_EXPLAIN_VIEWS_H_
