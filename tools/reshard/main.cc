// eonce reshard: moves a run of slots to another shard, one resumable step (mover.h), on
// the slot map in etcd; and seeds an empty store with the first map.
//
//   eonce reshard --etcd_endpoints=H:P[,H:P] [--etcd_prefix=P] --slots=0-99 --to=s2
//                 [--to_address=HOST:PORT] --tenant=T --operator_name=NAME
//                 (or a platform operator's certificate)
//   eonce reshard --etcd_endpoints=... --slots=0-99 --abort
//   eonce reshard seed --etcd_endpoints=... --file=slot_map.json
//
// Exit status: 0 done (or nothing to do), 1 the step failed (run it again), 2 bad flags.
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/base/clock.h"
#include "common/coord/etcd_flags.h"
#include "common/coord/etcd_map_store.h"
#include "common/coord/seed.h"
#include "common/base/flags.h"
#include "common/coord/slot_map_io.h"
#include "common/rpc/tls_flags.h"
#include "tools/reshard/grpc_shard_admin.h"
#include "tools/reshard/mover.h"

ABSL_FLAG(std::string, file, "", "seed: the first slot map (JSON, slots.proto)");
ABSL_FLAG(std::string, slots, "", "the run of slots to move, FIRST-LAST (or one slot)");
ABSL_FLAG(std::string, to, "", "the shard the slots move to");
ABSL_FLAG(std::string, to_address, "", "its sidecar's address, when it is not in the map yet");
ABSL_FLAG(bool, abort, false, "roll back a move that has not flipped");
ABSL_FLAG(bool, allow_unplaced, false,
          "move even if the old owner holds records that name no entity (they stay behind)");
ABSL_FLAG(std::string, tenant, "", "the platform operator's tenant (development headers)");
ABSL_FLAG(std::string, operator_name, "", "the platform operator (development headers)");
ABSL_FLAG(int64_t, drain_timeout_ms, 10'000, "how long the old owner waits for running commands");
ABSL_FLAG(std::string, stop_after, "", "drills: stop after freeze, copy, flip or drop");

namespace {

int Seed(eonce::MapStore& store) {
  absl::StatusOr<eonce::SlotMap> file = eonce::ReadSlotMapFile(absl::GetFlag(FLAGS_file));
  if (!file.ok()) {
    std::cerr << "reshard seed: " << file.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<eonce::SlotMap> held = eonce::SeedSlotMap(store, *file);
  if (!held.ok()) {
    std::cerr << "reshard seed: " << held.status().message() << "\n";
    return 1;
  }
  eonce::v1::SlotMap ours = file->proto(), theirs = held->proto();
  ours.set_epoch(0);
  theirs.set_epoch(0);
  if (ours.SerializeAsString() != theirs.SerializeAsString()) {
    std::cout << "reshard seed: the store holds a slot map already (epoch " << held->epoch()
              << "); left as it is: moves change it\n";
    return 0;
  }
  std::cout << "reshard seed: slot map at epoch " << held->epoch() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = eonce::ParseFlags(
      argc, argv,
      {"eonce reshard --etcd_endpoints=H:P --slots=FIRST-LAST --to=SHARD | --abort\n"
       "  eonce reshard seed --etcd_endpoints=H:P --file=slot_map.json"});
  const bool seed = args.size() == 2 && std::string(args[1]) == "seed";
  if (args.size() > 2 || (args.size() == 2 && !seed)) {
    std::cerr << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  const eonce::EtcdCoordOptions etcd = eonce::EtcdCoordOptionsFromFlags();
  absl::StatusOr<std::unique_ptr<eonce::EtcdCoordination>> coordination =
      eonce::EtcdCoordination::Create(etcd, eonce::RealClock::Get());
  if (!coordination.ok()) {
    std::cerr << "reshard: " << coordination.status().message() << "\n";
    return 2;
  }
  if (seed) return Seed((*coordination)->store());

  eonce::MoveOptions options;
  std::vector<std::string> range = absl::StrSplit(absl::GetFlag(FLAGS_slots), '-');
  if (range.empty() || range.size() > 2 || !absl::SimpleAtoi(range.front(), &options.first) ||
      !absl::SimpleAtoi(range.back(), &options.last)) {
    std::cerr << absl::ProgramUsageMessage() << "\n";
    return 2;
  }
  options.to = absl::GetFlag(FLAGS_to);
  options.to_address = absl::GetFlag(FLAGS_to_address);
  options.abort = absl::GetFlag(FLAGS_abort);
  options.allow_unplaced = absl::GetFlag(FLAGS_allow_unplaced);
  options.drain_timeout_ms = absl::GetFlag(FLAGS_drain_timeout_ms);
  options.stop_after = absl::GetFlag(FLAGS_stop_after);
  eonce::OperatorIdentity identity;
  identity.tenant = absl::GetFlag(FLAGS_tenant);
  identity.operator_name = absl::GetFlag(FLAGS_operator_name);
  identity.tls = eonce::TlsFilesFromFlags();

  absl::StatusOr<eonce::MoveReport> report =
      eonce::MoveSlots(options, (*coordination)->store(), eonce::GrpcShardAdmins(identity),
                       eonce::RealClock::Get());
  if (!report.ok()) {
    std::cerr << "reshard: " << report.status().message() << "\n";
    return report.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  for (const std::string& step : report->steps) std::cout << "  " << step << "\n";
  std::cout << "reshard: " << report->outcome << " (slots " << options.first << "-"
            << options.last << ", epoch " << report->epoch << ", copied " << report->copied
            << ", dropped " << report->dropped;
  if (report->frozen_ms >= 0) std::cout << ", paused " << report->frozen_ms << " ms";
  std::cout << ")\n";
  return 0;
}
