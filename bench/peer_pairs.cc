#include "bench/peer_pairs.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/commands.h"

namespace eonce::bench {

Figures PeerRunner::Run(const std::string& peer, const std::string& flow, int clients,
                        double seconds) const {
  Figures f;
  const std::string command =
      absl::StrCat("python3 ", script_, " measure --state ", state_dir_, " ", peer, " ", flow,
                   " ", clients, " --seconds ", seconds);
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (pipe == nullptr) {
    f.errors = 1;
    return f;
  }
  char line[256] = {};
  const bool read = std::fgets(line, sizeof(line), pipe.get()) != nullptr;
  const int status = pclose(pipe.release());
  double ops_per_s = 0, p50_us = 0;
  if (!read || status != 0 || std::sscanf(line, "%lf %lf", &ops_per_s, &p50_us) != 2) {
    std::fprintf(stderr, "bench: %s gave no figures (status %d)\n", command.c_str(), status);
    f.errors = 1;
    return f;
  }
  f.ops_per_s = ops_per_s;
  f.p50_us = p50_us;
  return f;
}

absl::Status BenchPeers(const MeasureOptions& measure, const std::vector<int>& points,
                        int pairs, v1::Sidecar::Stub& sidecar, int accounts,
                        const PeerRunner& peers, std::vector<PeerPair>* out) {
  MeasureOptions options = measure;
  options.runs = std::max(1, pairs);
  for (int n : points) {
    auto peer = [&, n](const char* name, const char* flow) -> LimitRunFn {
      return [&, n, name, flow](int64_t) { return peers.Run(name, flow, n, options.seconds); };
    };
    int64_t known = 0;
    PeerPair first{"first_seen", n, options.runs, {}};
    first.eonce = MeasurePaired(options, n, [&, n](int64_t i, std::function<void(bool)> done) {
      SubmitAsync(sidecar, TransferCommand(absl::StrCat("peers-", n, "-", i), accounts, i),
                  v1::APPLIED, std::move(done));
    }, peer("postgres", "first_seen"), &known, peer("redis", "first_seen"));
    // A duplicate is a retry of a command the warm-up above sent, resent as its client
    // built it (before the clock starts).
    std::vector<v1::SubmitRequest> sent(static_cast<size_t>(std::max<int64_t>(1, known)));
    for (size_t j = 0; j < sent.size(); ++j) {
      *sent[j].mutable_command() = TransferCommand(absl::StrCat("peers-", n, "-", j), accounts,
                                                   static_cast<int64_t>(j));
    }
    PeerPair duplicate{"duplicate", n, options.runs, {}};
    duplicate.eonce = MeasurePaired(options, n, [&](int64_t i, std::function<void(bool)> done) {
      ResendAsync(sidecar, sent[static_cast<size_t>(i) % sent.size()], v1::REPLAYED,
                  std::move(done));
    }, peer("postgres", "duplicate"), nullptr, peer("redis", "duplicate"));
    for (const PeerPair* p : {&first, &duplicate}) {
      if (p->eonce.paired_ratio <= 0 || p->eonce.paired_reference_ratio <= 0) {
        return absl::UnavailableError(
            absl::StrCat("no peer run of ", p->flow, " at ", n, " clients gave figures"));
      }
      out->push_back(*p);
    }
  }
  return absl::OkStatus();
}

std::vector<PeerBars> PeerBarsOf(const std::vector<PeerPair>& pairs) {
  std::vector<PeerBars> bars;
  for (const PeerPair& p : pairs) {
    const Figures& f = p.eonce;
    bars.push_back({p.flow, p.clients,
                    {f.paired_ratio, f.paired_ratio_min, f.paired_ratio_max},
                    {f.paired_reference_ratio, f.paired_reference_ratio_min,
                     f.paired_reference_ratio_max}});
  }
  return bars;
}

std::string PeerPairsJson(const std::vector<PeerPair>& pairs) {
  std::string json = "[";
  for (size_t k = 0; k < pairs.size(); ++k) {
    const PeerPair& p = pairs[k];
    const Figures& f = p.eonce;
    absl::StrAppend(&json, k ? "," : "", "\n    ", absl::StrFormat(
        "{\"flow\": \"%s\", \"clients\": %d, \"pairs\": %d, \"eonce_ops_per_s\": %.1f, "
        "\"eonce_p50_us\": %.1f, "
        "\"postgres\": {\"ops_per_s\": %.1f, \"ratio\": %.4f, \"ratio_min\": %.4f, "
        "\"ratio_max\": %.4f}, "
        "\"redis\": {\"ops_per_s\": %.1f, \"ratio\": %.4f, \"ratio_min\": %.4f, "
        "\"ratio_max\": %.4f}}",
        p.flow, p.clients, p.pairs, f.ops_per_s, f.p50_us, f.paired_limit_ops_per_s,
        f.paired_ratio, f.paired_ratio_min, f.paired_ratio_max, f.paired_reference_ops_per_s,
        f.paired_reference_ratio, f.paired_reference_ratio_min, f.paired_reference_ratio_max));
  }
  return json + (pairs.empty() ? "]" : "\n  ]");
}

std::string PeerPairsText(const std::vector<PeerPair>& pairs) {
  if (pairs.empty()) return "";
  std::string text =
      "\npeers, paired (A B A B): eonce through the sidecar (two hops, one Submit each) over\n"
      "each peer's run just before it; the median of the pairs' ratios (min - max)\n";
  absl::StrAppend(&text, absl::StrFormat("  %-10s %7s %5s %11s %11s %20s %11s %20s\n", "flow",
                                         "clients", "pairs", "eonce ops/s", "postgres",
                                         "eonce / postgres", "redis", "eonce / redis"));
  for (const PeerPair& p : pairs) {
    const Figures& f = p.eonce;
    absl::StrAppend(&text, absl::StrFormat(
        "  %-10s %7d %5d %11.0f %11.0f %7.2f (%4.2f-%4.2f) %11.0f %7.2f (%4.2f-%4.2f)\n",
        p.flow, p.clients, p.pairs, f.ops_per_s, f.paired_limit_ops_per_s, f.paired_ratio,
        f.paired_ratio_min, f.paired_ratio_max, f.paired_reference_ops_per_s,
        f.paired_reference_ratio, f.paired_reference_ratio_min, f.paired_reference_ratio_max));
  }
  return text;
}

}  // namespace eonce::bench
