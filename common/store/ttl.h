// Expiring values and the TTL compaction filter shared by the sidecar and the agent.
//
// Every value in a TTL column family is framed as
//   [8 bytes drop_at_ms][8 bytes trim_at_ms][payload]      (big-endian, 0 = never)
// At drop_at the value is removed. At trim_at a Trimmer may replace the payload with a
// smaller one (the sidecar keeps a tombstone after the response body goes). The filter
// reads "now" from the injected Clock. Compaction is not prompt, so readers must apply
// the same rules themselves: use Decode and the *At helpers, never the raw bytes.
#ifndef EONCE_COMMON_STORE_TTL_H_
#define EONCE_COMMON_STORE_TTL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "common/base/clock.h"
#include "rocksdb/compaction_filter.h"

namespace eonce {

struct Framed {
  int64_t drop_at_ms = 0;
  int64_t trim_at_ms = 0;
  absl::string_view payload;

  bool DroppedAt(int64_t now_ms) const { return drop_at_ms != 0 && now_ms >= drop_at_ms; }
  bool TrimmedAt(int64_t now_ms) const { return trim_at_ms != 0 && now_ms >= trim_at_ms; }
};

inline constexpr size_t kFrameHeaderBytes = 16;

std::string EncodeFramed(int64_t drop_at_ms, int64_t trim_at_ms, absl::string_view payload);
// False when `value` is shorter than the header.
bool DecodeFramed(absl::string_view value, Framed* out);

// Decodes a framed value and parses its payload into `message` (a protobuf message);
// false when either fails. `framed`, when given, receives the frame (its payload points
// into `value`).
template <typename Message>
bool ParseFramed(absl::string_view value, Message* message, Framed* framed = nullptr) {
  Framed decoded;
  if (!DecodeFramed(value, &decoded) ||
      !message->ParseFromArray(decoded.payload.data(), static_cast<int>(decoded.payload.size()))) {
    return false;
  }
  if (framed != nullptr) *framed = decoded;
  return true;
}

// Replaces a payload whose trim time has passed. Returns false to keep it unchanged.
class Trimmer {
 public:
  virtual ~Trimmer() = default;
  virtual bool Trim(absl::string_view payload, std::string* trimmed) = 0;
};

struct TtlStats {
  std::atomic<int64_t> dropped{0};
  std::atomic<int64_t> trimmed{0};
};

// Makes one filter per compaction. `clock`, `trimmer` and `stats` must outlive the DB;
// `trimmer` may be null (drop only).
class TtlCompactionFilterFactory : public rocksdb::CompactionFilterFactory {
 public:
  TtlCompactionFilterFactory(Clock& clock, Trimmer* trimmer, TtlStats& stats)
      : clock_(clock), trimmer_(trimmer), stats_(stats) {}

  std::unique_ptr<rocksdb::CompactionFilter> CreateCompactionFilter(
      const rocksdb::CompactionFilter::Context& context) override;
  const char* Name() const override { return "eonce.TtlCompactionFilterFactory"; }

 private:
  Clock& clock_;
  Trimmer* trimmer_;
  TtlStats& stats_;
};

}  // namespace eonce

#endif  // EONCE_COMMON_STORE_TTL_H_
