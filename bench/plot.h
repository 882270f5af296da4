// The bench's rows, and the chart of them it writes next to its figures.
#ifndef EONCE_BENCH_PLOT_H_
#define EONCE_BENCH_PLOT_H_

#include <string>
#include <vector>

#include "bench/loops.h"

namespace eonce::bench {

struct Row {
  std::string path;
  int in_flight;
  Figures figures;
  std::string limit;  // the physical limit this row is compared with
};

// eonce's rate over a peer's: the median of the pairs, and the least and the most.
struct PeerRatio {
  double median = 0, min = 0, max = 0;
};

// What the chart's first panel shows of one flow ("first_seen" or "duplicate") at one
// client count.
struct PeerBars {
  std::string flow;
  int clients = 0;
  PeerRatio postgres, redis;
};

// Writes latest.gnuplot and its data files under `out_dir` and runs gnuplot on them; true
// once it wrote latest.png. Two panels, meant to be read in seconds: eonce over Postgres
// and over Redis at each client count (first seen and duplicates: the paired ratios, with
// their spread), and each path at 64 in flight as a fraction of its physical limit (`ratios`,
// one per row, as the table gives them; horizontal bars, the limit a line at 1).
bool WritePlot(const std::vector<Row>& rows, const std::vector<double>& ratios,
               const std::vector<PeerBars>& peers, const std::string& out_dir);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_PLOT_H_
