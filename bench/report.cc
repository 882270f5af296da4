#include "bench/report.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace eonce::bench {

// The row's ratio to its limit: paired where it was measured in pairs, else the limit's
// row at the same calls in flight (at 64 for a row measured where its limit was not).
std::vector<double> RatiosToLimit(const std::vector<Row>& rows) {
  std::map<std::pair<std::string, int>, double> limit;
  for (const Row& r : rows) limit[{r.path, r.in_flight}] = r.figures.ops_per_s;
  std::vector<double> ratios;
  for (const Row& r : rows) {
    double lim = limit.count({r.limit, r.in_flight}) ? limit[{r.limit, r.in_flight}]
                                                      : limit[{r.limit, 64}];
    ratios.push_back(r.figures.paired_ratio > 0 ? r.figures.paired_ratio
                     : lim > 0                  ? r.figures.ops_per_s / lim
                                                : 0);
  }
  return ratios;
}

std::string RowsTable(const std::vector<Row>& rows) {
  std::string table = absl::StrFormat("%-28s %9s %12s %10s %10s %14s %11s %11s %8s\n", "path",
                                      "in flight", "ops/s", "p50 us", "p99 us", "x its limit",
                                      "cpu us/op", "switch/op", "steal %");
  const std::vector<double> ratios = RatiosToLimit(rows);
  for (size_t k = 0; k < rows.size(); ++k) {
    const Row& r = rows[k];
    absl::StrAppend(&table,
                    absl::StrFormat("%-28s %9d %12.0f %10.0f %10.0f %14.2f %11.0f %11.1f %8.0f\n",
                                    r.path, r.in_flight, r.figures.ops_per_s, r.figures.p50_us,
                                    r.figures.p99_us, ratios[k], r.figures.cpu_us_per_op,
                                    r.figures.switches_per_op, r.figures.steal_pct));
  }
  return table;
}

std::string RowsJson(const std::vector<Row>& rows) {
  std::string json;
  const std::vector<double> ratios = RatiosToLimit(rows);
  for (size_t k = 0; k < rows.size(); ++k) {
    const Row& r = rows[k];
    absl::StrAppend(&json, absl::StrFormat(
                               "    {\"path\": \"%s\", \"in_flight\": %d, \"ops_per_s\": %.1f, "
                               "\"p50_us\": %.1f, \"p99_us\": %.1f, \"ratio_to_limit\": %.4f, "
                               "\"cpu_us_per_op\": %.1f, \"switches_per_op\": %.2f, "
                               "\"paired_ratio\": %.4f, "
                               "\"paired_limit_ops_per_s\": %.1f, "
                               "\"paired_ledger_ratio\": %.4f, \"steal_pct\": %.1f, "
                               "\"limit\": \"%s\"}%s\n",
                               r.path, r.in_flight, r.figures.ops_per_s, r.figures.p50_us,
                               r.figures.p99_us, ratios[k], r.figures.cpu_us_per_op,
                               r.figures.switches_per_op, r.figures.paired_ratio,
                               r.figures.paired_limit_ops_per_s,
                               r.figures.paired_reference_ratio, r.figures.steal_pct, r.limit,
                               k + 1 < rows.size() ? "," : ""));
  }
  return json;
}

}  // namespace eonce::bench
