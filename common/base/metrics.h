// Metrics: a Prometheus endpoint (prometheus-cpp) and the small pieces components use to
// describe their metrics. Each component declares all of its metrics in one Collect
// function, which reads its counters at scrape time; nothing on a hot path touches
// prometheus-cpp. Names follow Prometheus conventions: eonce_<component>_<what>_<unit>,
// counters end in _total.
#ifndef EONCE_COMMON_BASE_METRICS_H_
#define EONCE_COMMON_BASE_METRICS_H_

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/metric_family.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace eonce {

using Labels = std::vector<std::pair<std::string, std::string>>;

prometheus::MetricFamily CounterFamily(const std::string& name, const std::string& help,
                                       const std::vector<std::pair<Labels, double>>& values);
prometheus::MetricFamily GaugeFamily(const std::string& name, const std::string& help,
                                     const std::vector<std::pair<Labels, double>>& values);

// A latency histogram with fixed buckets, cheap to observe from any thread.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 12> kBoundsSeconds = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5};
  void Observe(double seconds);
  prometheus::MetricFamily Family(const std::string& name, const std::string& help) const;

 private:
  std::array<std::atomic<uint64_t>, kBoundsSeconds.size() + 1> counts_{};
  std::atomic<uint64_t> sum_micros_{0};
};

class MetricsEndpoint {
 public:
  using Collect = std::function<std::vector<prometheus::MetricFamily>()>;

  // Serves GET /metrics on `address` ("host:port"; port 0 picks one).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& address,
                                                                Collect collect);
  ~MetricsEndpoint();
  int port() const;

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<class CollectFn> collectable_;
};

}  // namespace eonce

#endif  // EONCE_COMMON_BASE_METRICS_H_
