#include "bench/plot.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace eonce::bench {

bool WritePlot(const std::vector<Row>& rows, const std::string& out_dir) {
  const std::string data_file = out_dir + "/latest.dat";
  std::ofstream data(data_file);
  std::vector<std::string> paths;
  for (const Row& r : rows) {
    if (std::find(paths.begin(), paths.end(), r.path) == paths.end() &&
        r.path != "pipeline drain" && r.path.rfind("sidecar dup, ", 0) != 0) {
      paths.push_back(r.path);
    }
  }
  for (const std::string& p : paths) {
    data << "# " << p << "\n";
    for (const Row& r : rows) {
      if (r.path == p) {
        data << r.in_flight << " " << r.figures.ops_per_s << " " << r.figures.p99_us << "\n";
      }
    }
    data << "\n\n";
  }
  data.close();
  std::ofstream script(out_dir + "/latest.gnuplot");
  script << "set terminal png size 1200,500\nset output '" << out_dir << "/latest.png'\n"
         << "set multiplot layout 1,2\nset logscale x 2\nset xlabel 'calls in flight'\n"
         << "set key left top\nset title 'throughput (ops/s)'\nplot ";
  for (size_t k = 0; k < paths.size(); ++k) {
    script << (k ? ", " : "") << "'" << data_file << "' index " << k
           << " using 1:2 with linespoints title '" << paths[k] << "'";
  }
  script << "\nset title 'p99 latency (us)'\nset logscale y\nplot ";
  for (size_t k = 0; k < paths.size(); ++k) {
    script << (k ? ", " : "") << "'" << data_file << "' index " << k
           << " using 1:3 with linespoints title '" << paths[k] << "'";
  }
  script << "\nunset multiplot\n";
  script.close();
  return std::system(absl::StrCat("gnuplot ", out_dir, "/latest.gnuplot 2>/dev/null").c_str()) ==
         0;
}

}  // namespace eonce::bench
