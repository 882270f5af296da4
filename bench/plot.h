// The bench's rows, and the plot of them it writes next to its figures.
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

// Writes latest.dat and latest.gnuplot under `out_dir` (throughput and p99 against calls in
// flight, one line per path measured at several) and runs gnuplot on them; true once it
// wrote latest.png.
bool WritePlot(const std::vector<Row>& rows, const std::string& out_dir);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_PLOT_H_
