#include "common/base/metrics.h"

#include <exception>
#include <limits>

#include "absl/strings/str_cat.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace eonce {

class CollectFn : public prometheus::Collectable {
 public:
  explicit CollectFn(MetricsEndpoint::Collect collect) : collect_(std::move(collect)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return collect_(); }

 private:
  MetricsEndpoint::Collect collect_;
};

namespace {

prometheus::MetricFamily Family(const std::string& name, const std::string& help,
                                prometheus::MetricType type,
                                const std::vector<std::pair<Labels, double>>& values) {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  for (const auto& [labels, value] : values) {
    prometheus::ClientMetric metric;
    for (const auto& [k, v] : labels) metric.label.push_back({k, v});
    if (type == prometheus::MetricType::Counter) {
      metric.counter.value = value;
    } else {
      metric.gauge.value = value;
    }
    family.metric.push_back(std::move(metric));
  }
  return family;
}

}  // namespace

prometheus::MetricFamily CounterFamily(const std::string& name, const std::string& help,
                                       const std::vector<std::pair<Labels, double>>& values) {
  return Family(name, help, prometheus::MetricType::Counter, values);
}

prometheus::MetricFamily GaugeFamily(const std::string& name, const std::string& help,
                                     const std::vector<std::pair<Labels, double>>& values) {
  return Family(name, help, prometheus::MetricType::Gauge, values);
}

void LatencyHistogram::Observe(double seconds) {
  size_t i = 0;
  while (i < kBoundsSeconds.size() && seconds > kBoundsSeconds[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_micros_.fetch_add(static_cast<uint64_t>(seconds * 1e6), std::memory_order_relaxed);
}

prometheus::MetricFamily LatencyHistogram::Family(const std::string& name,
                                                  const std::string& help) const {
  prometheus::MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = prometheus::MetricType::Histogram;
  prometheus::ClientMetric metric;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBoundsSeconds.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    metric.histogram.bucket.push_back({cumulative, kBoundsSeconds[i]});
  }
  cumulative += counts_[kBoundsSeconds.size()].load(std::memory_order_relaxed);
  metric.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
  metric.histogram.sample_count = cumulative;
  metric.histogram.sample_sum = sum_micros_.load(std::memory_order_relaxed) / 1e6;
  family.metric.push_back(std::move(metric));
  return family;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& address,
                                                                        Collect collect) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  try {
    endpoint->exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_listen: cannot serve metrics on ", address, ": ", e.what()));
  }
  endpoint->collectable_ = std::make_shared<CollectFn>(std::move(collect));
  endpoint->exposer_->RegisterCollectable(endpoint->collectable_);
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() = default;

int MetricsEndpoint::port() const {
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace eonce
