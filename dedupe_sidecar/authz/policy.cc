#include "dedupe_sidecar/authz/policy.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace eonce {
namespace {

bool Matches(const std::string& pattern, const std::string& value) {
  return pattern == "*" || pattern == value;
}

// Limits on the policy file, so a bad file cannot exhaust memory.
constexpr size_t kMaxPolicyBytes = 4 << 20;
constexpr size_t kMaxRules = 100'000;

}  // namespace

Policy Policy::AllowAll() {
  Policy policy;
  policy.allow_all_ = true;
  return policy;
}

absl::StatusOr<Policy> Policy::Parse(const std::string& text) {
  if (text.size() > kMaxPolicyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("policy: larger than ", kMaxPolicyBytes, " bytes"));
  }
  Policy policy;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.empty()) continue;
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("policy line ", line_number, ": ", why));
    };
    if (policy.acts_.size() + policy.allows_.size() + policy.revokes_.size() +
            policy.read_only_.size() + policy.operators_.size() + policy.platform_.size() >=
        kMaxRules) {
      return bad(absl::StrCat("more than ", kMaxRules, " rules"));
    }
    if (words[0] == "act") {
      if (words.size() != 4) return bad("act takes <tenant> <workload|*> <actor|*>");
      if (words[1] == "*") return bad("act needs a tenant, not *");
      policy.acts_.push_back(Act{words[1], words[2], words[3]});
    } else if (words[0] == "allow") {
      if (words.size() != 4) return bad("allow takes <tenant> <actor|*> <method|*>");
      if (words[1] == "*") return bad("allow needs a tenant, not *");
      policy.allows_.push_back(Allow{words[1], words[2], words[3]});
    } else if (words[0] == "revoke") {
      if (words.size() != 3 && words.size() != 4) {
        return bad("revoke takes <tenant> <name|*> [below_epoch=N]");
      }
      Revoke revoke{words[1], words[2], 0};
      if (words.size() == 4) {
        if (!absl::StartsWith(words[3], "below_epoch=") ||
            !absl::SimpleAtoi(words[3].substr(12), &revoke.below_epoch) ||
            revoke.below_epoch <= 0) {
          return bad("expected below_epoch=<positive number>");
        }
      }
      policy.revokes_.push_back(revoke);
    } else if (words[0] == "operator") {
      if (words.size() != 3 || words[1] == "*") return bad("operator takes <tenant> <name|*>");
      policy.operators_.emplace_back(words[1], words[2]);
    } else if (words[0] == "platform") {
      if (words.size() != 3 || words[1] == "*" || words[2] == "*") {
        return bad("platform takes <tenant> <name>, no wildcard");
      }
      policy.platform_.emplace_back(words[1], words[2]);
    } else if (words[0] == "readonly" || words[0] == "mutating") {
      if (words.size() != 2 || !absl::StartsWith(words[1], "/")) {
        return bad(absl::StrCat(words[0], " takes one /package.Service/Method"));
      }
      // `mutating` is what every method not listed readonly is; it is kept parseable.
      if (words[0] == "readonly") policy.read_only_.insert(words[1]);
    } else {
      return bad(absl::StrCat("unknown rule \"", words[0], "\""));
    }
  }
  return policy;
}

PolicyDecision Policy::Check(const std::string& tenant, const std::string& workload,
                             const std::string& actor, const std::string& method,
                             int64_t credential_epoch) const {
  if (PolicyDecision standing = CheckRevoked(tenant, workload, actor, credential_epoch);
      !standing.allowed) {
    return standing;
  }
  return CheckGrants(tenant, workload, actor, method);
}

PolicyDecision Policy::CheckGrants(const std::string& tenant, const std::string& workload,
                                   const std::string& actor, const std::string& method) const {
  if (PolicyDecision acting = CheckAct(tenant, workload, actor); !acting.allowed) return acting;
  if (allow_all_) return PolicyDecision{};
  for (const Allow& a : allows_) {
    if (a.tenant == tenant && Matches(a.actor, actor) && Matches(a.method, method)) {
      return PolicyDecision{};
    }
  }
  return PolicyDecision{false, "POLICY_DENIED"};
}

PolicyDecision Policy::CheckActing(const std::string& tenant, const std::string& workload,
                                   const std::string& actor, int64_t credential_epoch) const {
  if (PolicyDecision standing = CheckRevoked(tenant, workload, actor, credential_epoch);
      !standing.allowed) {
    return standing;
  }
  return CheckAct(tenant, workload, actor);
}

PolicyDecision Policy::CheckRevoked(const std::string& tenant, const std::string& workload,
                                    const std::string& actor, int64_t credential_epoch) const {
  for (const Revoke& r : revokes_) {
    if (r.tenant == tenant && (Matches(r.actor, actor) || Matches(r.actor, workload)) &&
        (r.below_epoch == 0 || credential_epoch < r.below_epoch)) {
      return PolicyDecision{false, "CREDENTIAL_REVOKED"};
    }
  }
  return PolicyDecision{};
}

PolicyDecision Policy::CheckAct(const std::string& tenant, const std::string& workload,
                                const std::string& actor) const {
  if (allow_all_) return PolicyDecision{};
  if (actor != workload) {
    bool may_act = false;
    for (const Act& a : acts_) {
      if (a.tenant == tenant && Matches(a.workload, workload) && Matches(a.actor, actor)) {
        may_act = true;
        break;
      }
    }
    if (!may_act) return PolicyDecision{false, "ACTOR_NOT_PERMITTED"};
  }
  return PolicyDecision{};
}

bool Policy::IsReadOnly(const std::string& method) const { return read_only_.contains(method); }

bool Policy::IsOperator(const std::string& tenant, const std::string& name) const {
  if (name.empty()) return false;
  if (allow_all_) return true;
  for (const auto& [t, n] : operators_) {
    if (t == tenant && Matches(n, name)) return true;
  }
  return false;
}

bool Policy::IsPlatformOperator(const std::string& tenant, const std::string& name) const {
  if (name.empty()) return false;
  if (allow_all_) return true;
  for (const auto& [t, n] : platform_) {
    if (t == tenant && n == name) return true;
  }
  return false;
}

PolicyStore::PolicyStore(std::string path, Policy policy)
    : path_(std::move(path)), policy_(std::make_shared<const Policy>(std::move(policy))) {}

absl::StatusOr<std::unique_ptr<PolicyStore>> PolicyStore::Open(const std::string& path) {
  std::unique_ptr<PolicyStore> store(new PolicyStore(path, Policy::AllowAll()));
  if (path.empty()) return store;
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("policy_file: cannot read ", path));
  }
  absl::Status loaded = store->MaybeReload();
  if (!loaded.ok()) return loaded;
  return store;
}

absl::Status PolicyStore::MaybeReload() {
  if (path_.empty()) return absl::OkStatus();
  struct stat info;
  if (stat(path_.c_str(), &info) != 0) {
    return absl::UnavailableError(absl::StrCat("policy_file: cannot stat ", path_));
  }
  int64_t mtime_ns = static_cast<int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 +
                     info.st_mtim.tv_nsec;
  {
    absl::MutexLock lock(&mu_);
    if (mtime_ns == mtime_ns_ && info.st_size == size_) return absl::OkStatus();
  }
  std::ifstream file(path_);
  std::stringstream text;
  text << file.rdbuf();
  auto parsed = Policy::Parse(text.str());
  absl::MutexLock lock(&mu_);
  // Remember the version even when it is bad, so a bad file is reported once.
  mtime_ns_ = mtime_ns;
  size_ = info.st_size;
  if (!parsed.ok()) return parsed.status();
  std::atomic_store(&policy_, std::make_shared<const Policy>(std::move(*parsed)));
  ++reloads_;
  return absl::OkStatus();
}

void PolicyStore::Set(Policy policy) {
  absl::MutexLock lock(&mu_);
  std::atomic_store(&policy_, std::make_shared<const Policy>(std::move(policy)));
  ++reloads_;
}

PolicyDecision PolicyStore::Check(const std::string& tenant, const std::string& workload,
                                  const std::string& actor, const std::string& method,
                                  int64_t credential_epoch) {
  return std::atomic_load(&policy_)->Check(tenant, workload, actor, method, credential_epoch);
}

PolicyDecision PolicyStore::CheckActing(const std::string& tenant, const std::string& workload,
                                        const std::string& actor, int64_t credential_epoch) {
  return std::atomic_load(&policy_)->CheckActing(tenant, workload, actor, credential_epoch);
}

PolicyDecision PolicyStore::CheckGrants(const std::string& tenant, const std::string& workload,
                                        const std::string& actor, const std::string& method) {
  return std::atomic_load(&policy_)->CheckGrants(tenant, workload, actor, method);
}

bool PolicyStore::IsReadOnly(const std::string& method) {
  return std::atomic_load(&policy_)->IsReadOnly(method);
}

bool PolicyStore::IsOperator(const std::string& tenant, const std::string& name) {
  return std::atomic_load(&policy_)->IsOperator(tenant, name);
}

bool PolicyStore::IsPlatformOperator(const std::string& tenant, const std::string& name) {
  return std::atomic_load(&policy_)->IsPlatformOperator(tenant, name);
}

int64_t PolicyStore::reloads() const {
  absl::MutexLock lock(&mu_);
  return reloads_;
}

}  // namespace eonce
