#include "tools/demo/shards.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "eonce/v1/sidecar.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace eonce::demo {

absl::StatusOr<SlotMap> WriteEvenSlotMap(MapStore& store, uint64_t expected_epoch,
                                         const std::vector<std::string>& addresses) {
  std::vector<v1::ShardInfo> shards(addresses.size());
  for (size_t i = 0; i < addresses.size(); ++i) {
    shards[i].set_id(absl::StrCat("s", i));
    shards[i].set_address(addresses[i]);
  }
  absl::StatusOr<SlotMap> map = SlotMap::Even(shards);
  if (!map.ok()) return map.status();
  return store.CompareAndSwap(expected_epoch, *map);
}

absl::Status AwaitSlotMap(const std::string& address, uint64_t epoch, int64_t timeout_ms) {
  auto sidecar = v1::Sidecar::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    v1::SlotMap map;
    if (sidecar->GetSlotMap(&context, v1::GetSlotMapRequest(), &map).ok() &&
        map.epoch() >= epoch) {
      return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the sidecar at ", address, " did not adopt slot map epoch ", epoch));
}

int RunReshard(const std::string& bin, const std::vector<std::string>& args,
               const std::string& log) {
  // The arguments are the demo's own (paths, numbers, shard names): no shell quoting.
  std::string command = absl::StrCat(bin, "/tools/reshard/reshard ", absl::StrJoin(args, " "),
                                     " >> ", log, " 2>&1");
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int ShardOf(const SlotMap& map, const std::string& tenant, const std::string& type,
            const std::string& id) {
  const std::string& owner = map.OwnerOf(SlotOf(tenant, type, id));
  return std::atoi(owner.c_str() + 1);
}

}  // namespace eonce::demo
