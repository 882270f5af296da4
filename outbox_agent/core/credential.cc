#include "outbox_agent/core/credential.h"

#include <sys/stat.h>

#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/log.h"
#include "common/base/status.h"

namespace eonce {

absl::StatusOr<std::unique_ptr<CredentialState>> CredentialState::Load(OutboxStore& store,
                                                                      std::string tenant,
                                                                      std::string actor,
                                                                      int64_t initial_epoch) {
  std::unique_ptr<CredentialState> state(
      new CredentialState(store, std::move(tenant), std::move(actor)));
  EONCE_ASSIGN_OR_RETURN(auto saved, store.LoadCredential());
  absl::MutexLock lock(&state->mu_);
  state->epoch_ = std::max(saved.first, initial_epoch);
  state->revoked_ = saved.second;
  return state;
}

Session CredentialState::session() const {
  absl::MutexLock lock(&mu_);
  return Session{tenant_, actor_, epoch_};
}

bool CredentialState::active() const {
  absl::MutexLock lock(&mu_);
  return !revoked_ && !paused_;
}

bool CredentialState::revoked() const {
  absl::MutexLock lock(&mu_);
  return revoked_;
}

bool CredentialState::paused() const {
  absl::MutexLock lock(&mu_);
  return paused_;
}

bool CredentialState::Fits(const Session& sent_under, const v1::Fence& fence) const {
  absl::MutexLock lock(&mu_);
  return !revoked_ && fence.tenant() == tenant_ && sent_under.epoch == epoch_ &&
         fence.credential_epoch() == epoch_;
}

bool CredentialState::Current(const Session& sent_under) const {
  absl::MutexLock lock(&mu_);
  return sent_under.epoch == epoch_;
}

absl::Status CredentialState::Set(int64_t epoch, bool revoked) {
  {
    absl::MutexLock lock(&mu_);
    if (epoch < epoch_) {
      return Error(absl::StatusCode::kInvalidArgument, "INVALID_FIELD",
                   absl::StrCat("epoch: ", epoch, " is older than the current ", epoch_));
    }
    if (epoch > epoch_) paused_ = false;
    epoch_ = epoch;
    revoked_ = revoked;
  }
  LogInfo("credential changed", {{"epoch", absl::StrCat(epoch)},
                                 {"revoked", revoked ? "true" : "false"}});
  return store_.SaveCredential(epoch, revoked);
}

void CredentialState::PauseUntilRenewed() {
  absl::MutexLock lock(&mu_);
  if (!paused_) LogWarn("the sidecar refused our credential; replay paused until renewed");
  paused_ = true;
}

absl::Status CredentialState::MaybeReloadFile(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::UnavailableError(absl::StrCat("credential_file: cannot stat ", path));
  }
  int64_t mtime = static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec;
  int64_t epoch = 0;
  bool revoked = false;
  {
    absl::MutexLock lock(&mu_);
    if (mtime == file_mtime_ns_) return absl::OkStatus();
    file_mtime_ns_ = mtime;
    epoch = epoch_;  // the file states the whole credential: a missing epoch keeps ours,
  }                  // a missing revoked line means not revoked
  std::ifstream file(path);
  std::string line;
  int line_number = 0;
  while (std::getline(file, line) && line_number < 1000) {
    ++line_number;
    absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    std::pair<std::string, std::string> kv = absl::StrSplit(text, absl::MaxSplits('=', 1));
    if (kv.first == "epoch" && absl::SimpleAtoi(kv.second, &epoch)) continue;
    if (kv.first == "revoked" && (kv.second == "true" || kv.second == "false")) {
      revoked = kv.second == "true";
      continue;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("credential_file line ", line_number, ": expected epoch=N or revoked=BOOL"));
  }
  return Set(epoch, revoked);
}

}  // namespace eonce
