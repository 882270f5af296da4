#include "common/store/ttl.h"

#include "common/base/big_endian.h"

namespace eonce {
namespace {

class TtlCompactionFilter : public rocksdb::CompactionFilter {
 public:
  TtlCompactionFilter(int64_t now_ms, Trimmer* trimmer, TtlStats& stats)
      : now_ms_(now_ms), trimmer_(trimmer), stats_(stats) {}

  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/,
              const rocksdb::Slice& existing_value, std::string* new_value,
              bool* value_changed) const override {
    Framed framed;
    // A value without a frame is not ours to judge: keep it.
    if (!DecodeFramed(absl::string_view(existing_value.data(), existing_value.size()),
                      &framed)) {
      return false;
    }
    if (framed.DroppedAt(now_ms_)) {
      stats_.dropped.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (trimmer_ != nullptr && framed.TrimmedAt(now_ms_)) {
      std::string trimmed;
      if (trimmer_->Trim(framed.payload, &trimmed)) {
        // The trimmed value has no trim time left, so it is trimmed once.
        *new_value = EncodeFramed(framed.drop_at_ms, 0, trimmed);
        *value_changed = true;
        stats_.trimmed.fetch_add(1, std::memory_order_relaxed);
      }
    }
    return false;
  }

  const char* Name() const override { return "eonce.TtlCompactionFilter"; }

 private:
  const int64_t now_ms_;
  Trimmer* const trimmer_;
  TtlStats& stats_;
};

}  // namespace

std::string EncodeFramed(int64_t drop_at_ms, int64_t trim_at_ms, absl::string_view payload) {
  std::string out;
  out.reserve(kFrameHeaderBytes + payload.size());
  AppendBigEndian(&out, static_cast<uint64_t>(drop_at_ms));
  AppendBigEndian(&out, static_cast<uint64_t>(trim_at_ms));
  out.append(payload.data(), payload.size());
  return out;
}

bool DecodeFramed(absl::string_view value, Framed* out) {
  if (value.size() < kFrameHeaderBytes) return false;
  out->drop_at_ms = static_cast<int64_t>(ReadBigEndian64(value.substr(0, 8)));
  out->trim_at_ms = static_cast<int64_t>(ReadBigEndian64(value.substr(8, 8)));
  out->payload = value.substr(kFrameHeaderBytes);
  return true;
}

std::unique_ptr<rocksdb::CompactionFilter> TtlCompactionFilterFactory::CreateCompactionFilter(
    const rocksdb::CompactionFilter::Context& /*context*/) {
  // One "now" per compaction keeps a compaction's decisions consistent.
  return std::make_unique<TtlCompactionFilter>(clock_.NowMs(), trimmer_, stats_);
}

}  // namespace eonce
