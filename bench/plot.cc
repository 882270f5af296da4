#include "bench/plot.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace eonce::bench {
namespace {

// The rows the second panel shows: eonce's paths at 64 in flight against a physical limit
// (not the limits themselves, nor the rows whose reference is another path).
bool AgainstALimit(const Row& r) {
  return r.in_flight == 64 && r.path.find("(limit)") == std::string::npos &&
         r.limit.find("(limit)") != std::string::npos;
}

}  // namespace

bool WritePlot(const std::vector<Row>& rows, const std::vector<double>& ratios,
               const std::vector<PeerBars>& peers, const std::string& out_dir) {
  const std::string peers_file = out_dir + "/latest-peers.dat";
  std::ofstream peers_data(peers_file);
  // One line per flow and client count, first seen's before the duplicates' (a gap
  // between): x, its label, and eonce's ratio to Postgres and to Redis, each with the
  // least and the most of its pairs and its text.
  double x = 0;
  for (const char* flow : {"first_seen", "duplicate"}) {
    bool any = false;
    for (const PeerBars& p : peers) {
      if (p.flow != flow) continue;
      any = true;
      auto ratio = [](const PeerRatio& r) {
        return absl::StrFormat("%.4f %.4f %.4f \"%.2fx\"", r.median, r.min, r.max, r.median);
      };
      peers_data << x << " \"" << (p.flow == "first_seen" ? "first seen" : "duplicates")
                 << "\\n" << p.clients << (p.clients == 1 ? " client" : " clients") << "\" "
                 << ratio(p.postgres) << " " << ratio(p.redis) << "\n";
      x += 1;
    }
    if (any) x += 0.5;
  }
  peers_data.close();
  const std::string limits_file = out_dir + "/latest-limits.dat";
  std::ofstream limits_data(limits_file);
  int bars = 0;
  for (size_t k = 0; k < rows.size() && k < ratios.size(); ++k) {
    if (!AgainstALimit(rows[k])) continue;
    const bool put = rows[k].limit.rfind("synced put", 0) == 0;
    // y, fraction, color (0: echo's, 1: synced puts'), the label and the figure.
    limits_data << bars++ << " " << ratios[k] << " " << (put ? 1 : 0) << " \"" << rows[k].path
                << "\" \"" << absl::StrFormat("%.2f", ratios[k]) << "\"\n";
  }
  limits_data.close();

  std::ofstream script(out_dir + "/latest.gnuplot");
  script << "set terminal pngcairo size 1500,620 font 'sans,10' noenhanced\n"
         << "set output '" << out_dir << "/latest.png'\n"
         << "set multiplot layout 1,2 margins 0.05,0.98,0.1,0.8 spacing 0.2,0\n"
         << "set border 3; set tics nomirror\n"
         // Panel 1: eonce over each peer, a bar from parity (1) up or down to the median
         // of the pairs, their least and most as an error bar; a log scale, so that 2x and
         // 0.5x are as far from parity.
         << "set title \"eonce (the sidecar, two hops) over Postgres and Redis, same machine\\n"
            "each a median of runs in pairs (bar: least and most); above 1: eonce is faster\"\n"
         << "set logscale y\nset yrange [0.02:50]\nset ytics (0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20)\n"
         << "set grid ytics lc rgb '#e8e8e8'\nset xrange [-0.6:" << std::max(1.0, x - 0.5)
         << "]\nset xtics scale 0\nset style fill solid 0.9 noborder\n"
         << "set key outside top center horizontal samplen 1.5\n"
         << "set arrow 1 from graph 0, first 1 to graph 1, first 1 nohead lc rgb '#333333'\n";
  if (x == 0) {
    script << "set label 1 'no peers measured (./eonce bench --peers)' at graph 0.5,0.5 center\n"
           << "plot 1 notitle lc rgb '#ffffff'\nunset label 1\n";
  } else {
    // x:y:xlow:xhigh:ylow:yhigh boxes from 1 to the ratio.
    script << "plot '" << peers_file << "' using ($1-0.18):3:($1-0.34):($1-0.02):(1):3:xtic(2) "
           << "with boxxyerror lc rgb '#7570b3' title 'over the Postgres idempotency table', "
           << "'' using ($1+0.18):7:($1+0.02):($1+0.34):(1):7 with boxxyerror lc rgb '#d95f02' "
           << "title 'over Redis SET NX (a claim only)', "
           << "'' using ($1-0.18):4:(0):($5-$4) with vectors nohead lc rgb '#222222' notitle, "
           << "'' using ($1+0.18):8:(0):($9-$8) with vectors nohead lc rgb '#222222' notitle, "
           << "'' using ($1-0.18):($3 >= 1 ? $5 * 1.12 : $4 / 1.12):6 with labels font ',8' "
              "notitle, "
           << "'' using ($1+0.18):($7 >= 1 ? $9 * 1.12 : $8 / 1.12):10 with labels font ',8' "
              "notitle, "
           << "1.2 with lines dt 2 lc rgb '#7570b3' title 'target: 1.2x Postgres (first seen)'\n";
  }
  script << "unset arrow 1\nunset logscale y\nunset grid\n"
         << "set ytics autofreq nomirror\n";
  // Panel 2: horizontal bars, each path's fraction of its limit, the limit a line at 1.
  script << "set style fill solid 0.9 noborder\n"
         << "set grid xtics lc rgb '#e8e8e8'\nset key outside top center horizontal\n"
         << "set title \"each eonce path at 64 in flight, as a fraction of its physical limit\\n"
            "measured in the same run (1: the limit)\"\n"
         << "set xtics nomirror autofreq\nset format x '%.1f'\n"
         << "set xrange [0:1.15]\nset yrange [" << bars << "-0.5:-0.5]\n"
         << "set ytics scale 0\nset arrow 1 from 1," << bars << "-0.5 to 1,-0.5 nohead dt 2 "
         << "lc rgb '#555555'\nset palette defined (0 '#4c72b0', 1 '#dd8452')\n"
         << "set cbrange [0:1]\nunset colorbox\n";
  if (bars == 0) {
    script << "plot 0 notitle lc rgb '#ffffff'\n";
  } else {
    script << "plot '" << limits_file << "' using ($2/2):1:($2/2):(0.38):3:ytic(4) with "
           << "boxxyerror lc palette notitle, "
           << "NaN with boxes lc rgb '#4c72b0' title 'of gRPC echo (one hop)', "
           << "NaN with boxes lc rgb '#dd8452' title 'of synced RocksDB puts', "
           << "'' using ($2+0.01):1:5 with labels left font ',8' notitle\n";
  }
  script << "unset multiplot\n";
  script.close();
  return std::system(absl::StrCat("gnuplot ", out_dir, "/latest.gnuplot 2>/dev/null").c_str()) ==
         0;
}

}  // namespace eonce::bench
