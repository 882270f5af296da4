// eonce bench's table and JSON of its rows, each with its ratio to its limit: the ratio of
// the pairs where the row was measured in pairs with its limit, else of the two rows.
#ifndef EONCE_BENCH_REPORT_H_
#define EONCE_BENCH_REPORT_H_

#include <string>
#include <vector>

#include "bench/plot.h"

namespace eonce::bench {

// Each row's ratio to its limit, in the rows' order.
std::vector<double> RatiosToLimit(const std::vector<Row>& rows);
// The table's heading and one line per row.
std::string RowsTable(const std::vector<Row>& rows);
// One JSON object per row, comma-separated, one a line (latest.json's "rows" array's body).
std::string RowsJson(const std::vector<Row>& rows);

}  // namespace eonce::bench

#endif  // EONCE_BENCH_REPORT_H_
